// Periodic jobs and deferred one-shot actions run by whichever thread
// pumps progress (RRef control retries, call deadlines, heartbeats, sink
// callbacks that could not run under the engine's lock). There is no timer
// thread: DESIGN.md's threading rule is that nothing spins or wakes on its
// own, so timers ride the progress loop.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <vector>

namespace ferry {

class TimerList {
 public:
  using Clock = std::chrono::steady_clock;
  using Action = std::function<void()>;

  // Adds a job first due at `first`; period 0 runs it once. Under the
  // engine's lock.
  void Add(std::chrono::milliseconds period, Clock::time_point first, Action fn);

  // A lock-free look at whether anything may be due: a pump before then
  // skips the engine's lock and the scan. A stale answer only moves a job
  // by one pump.
  bool MaybeDue(Clock::time_point now) const {
    return now.time_since_epoch().count() >= due_.load(std::memory_order_relaxed);
  }

  // Appends the due jobs to `actions` (to run after the lock is released),
  // reschedules the periodic ones, drops the one-shots. Under the lock.
  void CollectDue(Clock::time_point now, std::vector<Action>* actions);

  // The earliest job, or `other` if sooner, becomes the MaybeDue() hint.
  void SetDueHint(Clock::time_point other);

  void Clear() { timers_.clear(); }

 private:
  struct Timer {
    std::chrono::milliseconds period;
    Clock::time_point next;
    Action fn;
  };
  std::vector<Timer> timers_;
  // When CollectDue next has something to do, in Clock ticks. Written
  // under the engine's lock; read by every pump without it.
  std::atomic<Clock::rep> due_{0};
};

}  // namespace ferry
