// ferry::Executor: a fixed pool of threads for work that may block
// (handlers registered with FERRY_HANDLER_MAY_BLOCK). Everything else runs
// on the thread that drove progress, so the fast path never hops threads.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ferry {

class Executor {
 public:
  explicit Executor(unsigned threads);
  ~Executor();  // runs what is queued, then joins
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  void Post(std::function<void()> fn);

 private:
  void Main();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace ferry
