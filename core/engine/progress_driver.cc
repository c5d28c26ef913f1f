// ProgressDriver (progress_driver.h).
#include "engine/progress_driver.h"

#include <ferry_support/cpu_relax.h>

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace ferry {

using ferry_support::CpuRelax;

ProgressDriver::ProgressDriver(Pump* pump, bool busy_poll, std::chrono::microseconds spin)
    : pump_(pump), busy_poll_(busy_poll), spin_(spin) {}

ProgressDriver::~ProgressDriver() {
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (kick_fd_ >= 0) close(kick_fd_);
}

Status ProgressDriver::Open() {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  kick_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || kick_fd_ < 0) {
    return Status(FERRY_INTERNAL, std::string("epoll/eventfd: ") + strerror(errno));
  }
  WatchWakeupFd(kick_fd_);
  return Status::Ok();
}

void ProgressDriver::WatchWakeupFd(int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
}

void ProgressDriver::StartLoop() {
  loop_ = std::thread([this] { LoopMain(); });
}

bool ProgressDriver::StopLoop() {
  if (stopping_.exchange(true)) return false;
  Kick();
  if (loop_.joinable()) loop_.join();
  return true;
}

bool ProgressDriver::WaitUntil(const std::function<bool()>& done,
                               Clock::time_point deadline) {
  foreground_waiters_.fetch_add(1);  // a read-modify-write: see NotifyWaiters
  auto idle_since = Clock::now();
  bool result = false;
  while (true) {
    if (done()) {
      result = true;
      break;
    }
    const auto now = Clock::now();
    if (now >= deadline || stopping_.load()) break;
    if (pump_->PumpOnce()) {
      idle_since = Clock::now();
      continue;
    }
    if (busy_poll_ || now - idle_since < spin_) {
      CpuRelax();
      continue;
    }
    // Nothing to do for a while: sleep until a transport has work, a kick,
    // or at most 5 ms (timers, and replies another thread processed).
    SleepOnWakeupFds(std::min(deadline, now + std::chrono::milliseconds(5)));
    idle_since = Clock::now();
  }
  if (foreground_waiters_.fetch_sub(1) == 1) {
    std::lock_guard<std::mutex> l(wait_mu_);
    wait_cv_.notify_all();
  }
  return result;
}

void ProgressDriver::SleepOnWakeupFds(Clock::time_point deadline) {
  const auto now = Clock::now();
  if (now >= deadline) return;
  int timeout_ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count());
  if (timeout_ms < 1) timeout_ms = 1;
  if (!all_have_wakeup_fd_) timeout_ms = 1;  // a transport must be polled
  epoll_event evs[8];
  const int n = epoll_wait(epoll_fd_, evs, 8, timeout_ms);
  for (int i = 0; i < n; ++i) {
    if (evs[i].data.fd == kick_fd_) {
      uint64_t v;
      (void)!read(kick_fd_, &v, sizeof v);
    }
  }
}

void ProgressDriver::Kick() {
  if (kick_fd_ < 0) return;
  uint64_t one = 1;
  (void)!write(kick_fd_, &one, sizeof one);
}

void ProgressDriver::LoopMain() {
  auto idle_since = Clock::now();
  uint32_t idle_pumps = 0;
  while (!stopping_.load()) {
    if (foreground_waiters_.load() > 0) {
      // A caller is driving progress (and serving requests) on its own
      // thread; stay out of its way so that it gets its reply first-hand.
      std::unique_lock<std::mutex> l(wait_mu_);
      wait_cv_.wait_for(l, std::chrono::milliseconds(20), [&] {
        return foreground_waiters_.load() == 0 || stopping_.load();
      });
      continue;
    }
    if (pump_->PumpOnce()) {
      idle_since = Clock::now();
      continue;
    }
    const auto now = Clock::now();
    if (busy_poll_ || now - idle_since < spin_) {
      // Yield, not only pause: an application thread on this CPU (about to
      // call, or to wait and so take over progress, or a handler just
      // handed to the executor) must get to run within microseconds, not at
      // the end of our time slice. But only every 8th idle pump: a
      // sched_yield costs about as much as a pump (~0.3 us on a VM), so a
      // yield after each one would double the time to notice an arrival.
      if ((++idle_pumps & 7) == 0) {
        std::this_thread::yield();
      } else {
        CpuRelax();
      }
      continue;
    }
    SleepOnWakeupFds(now + std::chrono::milliseconds(20));
    idle_since = Clock::now();
  }
}

}  // namespace ferry
