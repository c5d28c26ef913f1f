// ProgressDriver: who drives the transports, and how a thread that has
// nothing to do waits.
//
// Why no I/O thread on the hot path (DESIGN.md, "The core"): a cross-thread
// wake-up costs ~25 us on a VM, more than a whole small round trip. So a
// thread waiting for a reply drives progress itself (WaitUntil) and receives
// the reply on its own core; whichever thread wants progress calls the
// pump, which takes the progress lock with try_lock (one driver at a time,
// the others retry). A background thread (the loop) pumps only while no
// foreground thread waits, so requests are served while the application is
// idle. Idle waiters spin for `spin`, then sleep in epoll on every
// transport's wakeup fd plus a kick eventfd; a transport without a wakeup fd
// makes sleeps 1 ms polls.
#pragma once

#include "common/status.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace ferry {

class ProgressDriver {
 public:
  using Clock = std::chrono::steady_clock;

  // What the driver drives: one pass over every transport and the timers.
  class Pump {
   public:
    virtual ~Pump() = default;
    // Drives progress once if no other thread is; true if anything happened.
    virtual bool PumpOnce() = 0;
  };

  ProgressDriver(Pump* pump, bool busy_poll, std::chrono::microseconds spin);
  ~ProgressDriver();  // closes the fds; the loop must be stopped
  ProgressDriver(const ProgressDriver&) = delete;
  ProgressDriver& operator=(const ProgressDriver&) = delete;

  // Creates the epoll set and the kick eventfd.
  Status Open();
  // Adds a transport's wakeup fd to the sleep set.
  void WatchWakeupFd(int fd);
  // A transport has no wakeup fd: sleeps become short polls.
  void PollEveryMillisecond() { all_have_wakeup_fd_ = false; }

  void StartLoop();
  // Sets the stopping flag and joins the loop. False if already stopping.
  bool StopLoop();

  // Pumps (or sleeps on the wakeup fds, or yields to the thread that pumps)
  // until `done()` or `deadline`. Returns done().
  bool WaitUntil(const std::function<bool()>& done, Clock::time_point deadline);
  // Sleeps until a transport has work, a Kick(), or `deadline`.
  void SleepOnWakeupFds(Clock::time_point deadline);
  // Wakes threads sleeping in WaitUntil / the loop.
  void Kick();
  // Call after the state a `done()` watches changed on a thread that is not
  // pumping (a reply from another thread): wakes WaitUntil's sleepers.
  void NotifyWaiters() {
    // A thread sleeping in epoll_wait is woken by the kick; one yielding to
    // the pumping thread re-checks within its spin. A read-modify-write,
    // not a load: the state change (a release store) then this, against
    // the waiter's increment then its `done()` (an acquire load), is a
    // store-then-load on each side of two words, where plain loads may both
    // read the old values on a weakly ordered CPU (the waiter would sleep
    // through its reply, until its 5 ms bound). RMWs of one word are totally
    // ordered: if this one comes first, the waiter's increment reads from it
    // and so sees the state change; if it comes second, it sees the waiter.
    if (foreground_waiters_.fetch_add(0, std::memory_order_acq_rel) > 0 && !busy_poll_) {
      Kick();
    }
  }

 private:
  void LoopMain();

  Pump* const pump_;
  const bool busy_poll_;
  const std::chrono::microseconds spin_;
  std::atomic<int> foreground_waiters_{0};  // threads in WaitUntil
  std::mutex wait_mu_;                      // for wait_cv_
  std::condition_variable wait_cv_;         // the last waiter left
  int epoll_fd_ = -1;                       // every transport's wakeup fd plus kick_fd_
  int kick_fd_ = -1;                        // eventfd
  bool all_have_wakeup_fd_ = true;
  std::atomic<bool> stopping_{false};
  std::thread loop_;
};

}  // namespace ferry
