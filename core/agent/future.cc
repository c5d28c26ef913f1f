// ferry::Future (future.h).
#include "agent/future.h"

#include "agent/executor.h"
#include "engine/engine.h"

namespace ferry {

bool Future::Complete(Status status, Value value) {
  std::vector<std::function<void()>> then;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (done_.load(std::memory_order_relaxed)) return false;
    status_ = std::move(status);
    value_ = std::move(value);
    then.swap(then_);
    done_.store(true, std::memory_order_release);
  }
  done_cv_.notify_all();
  for (auto& fn : then) fn();
  if (engine_ != nullptr) engine_->NotifyWaiters();
  return true;
}

bool Future::Wait(std::chrono::steady_clock::time_point deadline) {
  if (done()) return true;
  if (engine_ == nullptr) return false;
  if (Executor::Current() != nullptr) {
    // A handler's nested wait: the progress thread completes the future
    // (nobody else drives progress here), and the executor may grow a
    // thread for the calls queued behind this one.
    Executor::Blocking blocking;
    std::unique_lock<std::mutex> l(mu_);
    if (deadline == std::chrono::steady_clock::time_point::max()) {
      done_cv_.wait(l, [this] { return done(); });
      return true;
    }
    return done_cv_.wait_until(l, deadline, [this] { return done(); });
  }
  return engine_->WaitUntil([this] { return done(); }, deadline);
}

StatusOr<Value> Future::Take() {
  std::lock_guard<std::mutex> l(mu_);
  if (!done_.load())
    return Status(FERRY_FAILED_PRECONDITION, "the call has not finished");
  if (!status_.ok()) return status_;
  if (taken_) return Status(FERRY_FAILED_PRECONDITION, "the value was taken already");
  taken_ = true;
  return std::move(value_);
}

void Future::Then(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!done_.load()) {
      then_.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

bool Future::Cancel() {
  std::function<void()> cancel;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (done_.load()) return false;
    cancel = canceller_;
  }
  if (cancel) cancel();
  // The call table may have lost a race with the reply: either way done.
  return Complete(Status(FERRY_CANCELLED, "the call was cancelled by its caller")) ||
         (done() && status().code() == FERRY_CANCELLED);
}

void Future::SetCanceller(std::function<void()> fn) {
  std::lock_guard<std::mutex> l(mu_);
  canceller_ = std::move(fn);
}

}  // namespace ferry
