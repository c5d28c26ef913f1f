// ferry::Executor (executor.h).
#include "agent/executor.h"

#include <algorithm>

namespace ferry {
namespace {
thread_local Executor* t_executor = nullptr;
}

Executor::Executor(unsigned threads, unsigned max_threads)
    : max_threads_(std::max(threads, max_threads)) {
  std::lock_guard<std::mutex> l(mu_);
  for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { Main(); });
}

Executor::~Executor() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  // No thread is added once stopping_ is set: threads_ is fixed now.
  for (auto& t : threads_) t.join();
}

Executor* Executor::Current() {
  return t_executor;
}

unsigned Executor::threads() {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<unsigned>(threads_.size());
}

Executor::Load Executor::load() {
  std::lock_guard<std::mutex> l(mu_);
  return Load{queue_.size(), static_cast<unsigned>(threads_.size()), idle_, blocked_};
}

void Executor::Post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back(std::move(fn));
    GrowIfStarvedLocked();
  }
  cv_.notify_one();
}

void Executor::GrowIfStarvedLocked() {
  // Only when some thread is blocked: a pool merely busy with work of its
  // own keeps its size (the work queued is not waiting on it).
  if (stopping_ || blocked_ == 0 || idle_ >= queue_.size() ||
      threads_.size() >= max_threads_) {
    return;
  }
  threads_.emplace_back([this] { Main(); });
}

Executor::Blocking::Blocking() : e_(t_executor) {
  if (e_ == nullptr) return;
  std::lock_guard<std::mutex> l(e_->mu_);
  ++e_->blocked_;
  e_->GrowIfStarvedLocked();
}

Executor::Blocking::~Blocking() {
  if (e_ == nullptr) return;
  std::lock_guard<std::mutex> l(e_->mu_);
  --e_->blocked_;
}

void Executor::Main() {
  t_executor = this;
  while (true) {
    std::function<void()> fn;
    {
      std::unique_lock<std::mutex> l(mu_);
      ++idle_;
      cv_.wait(l, [this] { return stopping_ || !queue_.empty(); });
      --idle_;
      if (queue_.empty()) return;
      fn = std::move(queue_.front());
      queue_.pop_front();
    }
    fn();
  }
}

}  // namespace ferry
