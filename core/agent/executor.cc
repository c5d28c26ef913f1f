// ferry::Executor (executor.h).
#include "agent/executor.h"

namespace ferry {

Executor::Executor(unsigned threads) {
  for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { Main(); });
}

Executor::~Executor() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_.store(true);
  }
  cv_.notify_all();
  std::function<void()> wake;
  {
    std::lock_guard<std::mutex> l(mu_);
    wake = progress_.wake;
  }
  if (wake) wake();
  for (auto& t : threads_) t.join();
}

void Executor::StartLeading(ProgressWait progress) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_.load() || progress_.wait) return;
    progress_ = std::move(progress);
    progress_ended_ = false;
  }
  cv_.notify_one();
}

void Executor::StopLeading() {
  std::function<void()> wake;
  {
    std::lock_guard<std::mutex> l(mu_);
    progress_ended_ = true;
    stop_leading_.store(true);
    wake = progress_.wake;
  }
  if (wake) wake();
  std::unique_lock<std::mutex> l(mu_);
  led_cv_.wait(l, [this] { return !leading_; });
}

void Executor::Post(std::function<void()> fn) {
  bool wake_leader;
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back(std::move(fn));
    has_work_.store(true);
    wake_leader = leading_;
  }
  // An idle leader takes it (usually this very thread: the call was
  // dispatched inside its progress); else a sleeper wakes.
  if (wake_leader) {
    progress_.wake();
  } else {
    cv_.notify_one();
  }
}

std::function<void()> Executor::Lead() {
  const bool progressing = progress_.wait(
      [this] { return has_work_.load() || stopping_.load() || stop_leading_.load(); });
  std::unique_lock<std::mutex> l(mu_);
  leading_ = false;
  if (stop_leading_.load()) led_cv_.notify_all();  // StopLeading() waits for this
  if (!progressing) progress_ended_ = true;
  if (queue_.empty()) {
    if (!progress_ended_ && !stopping_.load()) return {};  // spurious: lead again
    cv_.notify_all();  // the sleepers take over
    return {};
  }
  std::function<void()> fn = std::move(queue_.front());
  queue_.pop_front();
  has_work_.store(!queue_.empty());
  // More work, or a vacancy to lead: a sleeper takes it while this thread
  // runs its job.
  cv_.notify_one();
  return fn;
}

void Executor::Main() {
  while (true) {
    std::function<void()> fn;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [this] {
        return stopping_.load() || !queue_.empty() || (!leading_ && !progress_ended_);
      });
      if (!queue_.empty()) {
        fn = std::move(queue_.front());
        queue_.pop_front();
        has_work_.store(!queue_.empty());
      } else if (stopping_.load()) {
        return;
      } else {
        leading_ = true;
      }
    }
    if (!fn) fn = Lead();
    if (fn) fn();
  }
}

}  // namespace ferry
