#include "wakeup.h"

#include "ferry_plugin/log.h"

#include <rdma/fi_errno.h>

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ferry_fabric {
namespace {

bool Add(int epoll_fd, int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN;  // level-triggered
  ev.data.fd = fd;
  return epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) == 0;
}

}  // namespace

Wakeup::~Wakeup() {
  if (timer_fd_ >= 0) close(timer_fd_);
  if (event_fd_ >= 0) close(event_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

Status Wakeup::Open(int cq_wait_fd) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (epoll_fd_ < 0 || event_fd_ < 0 || timer_fd_ < 0 || !Add(epoll_fd_, event_fd_) ||
      !Add(epoll_fd_, timer_fd_) || !Add(epoll_fd_, cq_wait_fd)) {
    int e = errno;
    return Error(FERRY_UNAVAILABLE,
                 "fabric: setting up the wakeup fd (epoll + eventfd + "
                 "timerfd + CQ wait fd %d): %s",
                 cq_wait_fd, strerror(e));
  }
  return Status();
}

void Wakeup::Signal() {
  if (signalled_) return;
  uint64_t one = 1;
  if (write(event_fd_, &one, sizeof one) == sizeof one) signalled_ = true;
}

void Wakeup::Clear() {
  if (!signalled_) return;
  uint64_t value;
  if (read(event_fd_, &value, sizeof value) == sizeof value || errno == EAGAIN) {
    signalled_ = false;
  }
}

void Wakeup::Settle(bool has_work, fid_fabric* fabric, fid_cq* cq) {
  if (epoll_fd_ < 0) return;
  if (has_work) {
    Signal();
    return;
  }
  fid* fids[1] = {&cq->fid};
  int rc = fi_trywait(fabric, fids, 1);
  if (rc == FI_SUCCESS) {
    Clear();
  } else {
    // -FI_EAGAIN: completions are queued or the provider needs a progress
    // call before the CQ fd may be trusted. Anything else: stay awake too;
    // a spurious wakeup costs one progress() call, a missed one a hang.
    if (rc != -FI_EAGAIN) {
      FERRY_PLUGIN_LOG(FERRY_LOG_DEBUG, "fi_trywait: %s (%d)", fi_strerror(-rc), rc);
    }
    Signal();
  }
}

void Wakeup::SetTicking(bool on) {
  if (epoll_fd_ < 0 || on == ticking_) return;
  itimerspec spec{};
  if (on) {
    spec.it_value.tv_nsec = 100 * 1000 * 1000;
    spec.it_interval.tv_nsec = 100 * 1000 * 1000;
  }
  if (timerfd_settime(timer_fd_, 0, &spec, nullptr) == 0) ticking_ = on;
  if (!on) DrainTimer();
}

void Wakeup::DrainTimer() {
  if (timer_fd_ < 0) return;
  uint64_t expirations;
  while (read(timer_fd_, &expirations, sizeof expirations) > 0) {
  }
}

}  // namespace ferry_fabric
