// ferry::Executor: a fixed pool of threads for work that may block
// (handlers registered with FERRY_HANDLER_MAY_BLOCK). Everything else runs
// on the thread that drove progress, so the fast path never hops threads.
//
// With a ProgressWait, one idle thread of the pool (the leader) waits for
// work by driving the worker's progress itself rather than sleeping on a
// condition variable: a call arriving is received, dispatched and run on
// that same thread, which saves a thread wake-up per call (about 25 us on
// this project's VMs, more than the rest of a call). The others sleep and
// are woken only when the leader is busy. The agent gives a ProgressWait
// only in sleeping mode: in busy-poll mode a leader would spin beside the
// threads that need the CPU.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ferry {

class Executor {
 public:
  struct ProgressWait {
    // Drives progress until done(); false if progress stopped for good
    // (the engine is stopping) before done().
    std::function<bool(const std::function<bool()>& done)> wait;
    // Makes a thread inside wait() re-check done() soon.
    std::function<void()> wake;
  };

  explicit Executor(unsigned threads);
  // From now on, an idle thread leads (waits through `progress`). Called
  // once the worker has joined and its progress may be driven by anyone.
  void StartLeading(ProgressWait progress);
  // No thread leads from now on; returns once the leader (if any) has left
  // its wait. Before the engine stops: a leader must not be inside
  // progress when the engine closes its descriptors.
  void StopLeading();
  ~Executor();  // runs what is queued, then joins
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  void Post(std::function<void()> fn);

 private:
  void Main();
  // Leads: waits for work through progress. Returns the job to run, or an
  // empty function (nothing queued: stopping, or progress ended).
  std::function<void()> Lead();

  ProgressWait progress_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable led_cv_;  // the leader left its wait (StopLeading)
  std::deque<std::function<void()>> queue_;
  std::atomic<bool> has_work_{false};   // !queue_.empty(), for the leader's check
  std::atomic<bool> stopping_{false};
  std::atomic<bool> stop_leading_{false};
  bool leading_ = false;                // a thread is in Lead()'s wait
  bool progress_ended_ = true;          // no ProgressWait (yet), or the engine stopped
  std::vector<std::thread> threads_;
};

}  // namespace ferry
