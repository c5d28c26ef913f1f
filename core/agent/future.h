// ferry::Future: the outcome of a call — a Value or a Status — completed
// exactly once, waited on by driving the worker's progress (Engine), with
// continuations run by whoever completes it.
#pragma once

#include "common/status.h"
#include "wire/value.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace ferry {

class Engine;

class Future : public std::enable_shared_from_this<Future> {
 public:
  // `keepalive` keeps the engine's owner alive while the future lives.
  Future(Engine* engine, std::shared_ptr<void> keepalive)
      : engine_(engine), keepalive_(std::move(keepalive)) {}

  // First completion wins; later ones are ignored (a late reply after a
  // timeout). Runs continuations on this thread.
  bool Complete(Status status, Value value = Value());
  bool done() const { return done_.load(std::memory_order_acquire); }
  // Waits until done or `deadline`, driving progress; on an executor
  // thread (a handler's nested wait) it sleeps instead, as the worker's
  // progress thread runs, and lets the executor add a thread meanwhile
  // (executor.h). True when done.
  bool Wait(std::chrono::steady_clock::time_point deadline);
  // Valid once done.
  const Status& status() const { return status_; }
  // The value, once, if done and OK.
  StatusOr<Value> Take();
  // Runs `fn` when done (now, here, if already done).
  void Then(std::function<void()> fn);
  // The caller gives up: the call's owner ends it (CANCELLED) and tells
  // the callee. False when already done. A future no call table owns
  // completes with CANCELLED itself.
  bool Cancel();
  // Set once by the call table that owns the call (OutgoingCalls).
  void SetCanceller(std::function<void()> fn);

 private:
  Engine* engine_;
  std::shared_ptr<void> keepalive_;
  std::mutex mu_;
  std::condition_variable done_cv_;  // waiters on executor threads
  std::atomic<bool> done_{false};
  bool taken_ = false;
  Status status_;
  Value value_;
  std::vector<std::function<void()>> then_;
  std::function<void()> canceller_;
};

}  // namespace ferry
