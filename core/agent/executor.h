// ferry::Executor: the pool of threads for work that may block (handlers
// registered with FERRY_HANDLER_MAY_BLOCK, and calls from a worker to
// itself). Everything else runs on the thread that drove progress, so the
// fast path never hops threads.
//
// A handler that blocks in a nested wait (a call to another worker, a
// future) says so (Blocking): while work is queued and every thread is busy
// or blocked, the pool grows by a thread, up to a bound, so blocked
// handlers neither starve the calls queued behind them nor deadlock on
// calls that must run here for them to finish (A calls B calls A).
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
  // `threads` to start with; at most `max_threads` (>= threads) while
  // handlers block in nested waits. Threads added stay until shutdown.
  Executor(unsigned threads, unsigned max_threads);
  ~Executor();  // runs what is queued, then joins
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  void Post(std::function<void()> fn);

  // The executor whose thread this is, or null.
  static Executor* Current();
  // Brackets a blocking wait on one of this executor's threads.
  class Blocking {
   public:
    Blocking();  // no-op off an executor thread
    ~Blocking();
    Blocking(const Blocking&) = delete;
    Blocking& operator=(const Blocking&) = delete;

   private:
    Executor* e_;
  };
  // Threads started so far (tests).
  unsigned threads();
  // What the debug dump shows: work queued and not started, and the
  // threads (all, idle, blocked in a nested wait).
  struct Load {
    size_t queued = 0;
    unsigned threads = 0, idle = 0, blocked = 0;
  };
  Load load();

 private:
  void Main();
  // Under mu_: adds a thread if work waits and no thread is free to take it.
  void GrowIfStarvedLocked();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  unsigned max_threads_;
  unsigned idle_ = 0;     // threads waiting for work
  unsigned blocked_ = 0;  // threads in a Blocking wait
  std::vector<std::thread> threads_;
};

}  // namespace ferry
