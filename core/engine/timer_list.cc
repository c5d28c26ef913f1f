// TimerList (timer_list.h).
#include "engine/timer_list.h"

#include <algorithm>

namespace ferry {

void TimerList::Add(std::chrono::milliseconds period, Clock::time_point first,
                    Action fn) {
  timers_.push_back({period, first, std::move(fn)});
  const Clock::rep t = first.time_since_epoch().count();
  if (t < due_.load(std::memory_order_relaxed)) {
    due_.store(t, std::memory_order_relaxed);
  }
}

void TimerList::CollectDue(Clock::time_point now, std::vector<Action>* actions) {
  for (size_t i = 0; i < timers_.size();) {
    Timer& t = timers_[i];
    if (now < t.next) {
      ++i;
      continue;
    }
    if (t.period.count() == 0) {  // one-shot (deferred action)
      actions->push_back(std::move(t.fn));
      timers_.erase(timers_.begin() + static_cast<long>(i));
      continue;
    }
    t.next = now + t.period;
    actions->push_back(t.fn);
    ++i;
  }
}

void TimerList::SetDueHint(Clock::time_point other) {
  Clock::time_point due = other;
  for (const Timer& t : timers_) due = std::min(due, t.next);
  due_.store(due.time_since_epoch().count(), std::memory_order_relaxed);
}

}  // namespace ferry
