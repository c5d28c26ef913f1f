// The host's wakeup fd for providers whose CQ has an FI_WAIT_FD wait object.
//
// The ABI wants a level-triggered fd, readable whenever progress() has work.
// libfabric's CQ wait fd is not that by itself: it may only be slept on
// after fi_trywait() returned FI_SUCCESS (otherwise completions already
// queued, or provider work that needs a progress call, never signal it).
// So the host gets an epoll fd holding
//   - the CQ's wait fd (level-triggered),
//   - an eventfd for work the plugin itself has (queued events, sends to
//     retry, reads to post): signalled while there is such work,
//   - a timerfd that ticks while a connect or close deadline is armed.
// At the end of every progress() (and host call) Settle() runs: with work
// left it signals the eventfd; without, it calls fi_trywait, and only if that
// says it is safe does it clear the eventfd, so the fd is quiet exactly when
// sleeping on the CQ fd is safe. -FI_EAGAIN from fi_trywait keeps the eventfd
// signalled: the host calls progress() again, which reads the CQ.
#pragma once

#include "status.h"

#include <rdma/fabric.h>
#include <rdma/fi_eq.h>

namespace ferry_fabric {

class Wakeup {
 public:
  Wakeup() = default;
  ~Wakeup();
  Wakeup(const Wakeup&) = delete;
  Wakeup& operator=(const Wakeup&) = delete;

  Status Open(int cq_wait_fd);
  int fd() const { return epoll_fd_; }

  // End of progress() or of a host call: see above. With `has_work` it only
  // signals; without, it runs fi_trywait and clears only if that allows.
  void Settle(bool has_work, fid_fabric* fabric, fid_cq* cq);
  // A periodic tick while deadlines are armed (100 ms), so a sleeping host
  // still runs progress() to expire them.
  void SetTicking(bool on);
  // Consumes expired ticks (progress() calls it).
  void DrainTimer();

 private:
  void Signal();
  void Clear();

  int epoll_fd_ = -1;
  int event_fd_ = -1;
  int timer_fd_ = -1;
  bool signalled_ = false;
  bool ticking_ = false;
};

}  // namespace ferry_fabric
