// ferry::IncomingCalls: serving the calls that arrive at this worker — the
// functions registered by name, the calls that came before their function
// was registered, fetches of RRef values this worker owns, and the
// replies. ferry::IncomingCall is one call being served (a ferry_call_t).
//
// Threading: a handler registered as not blocking runs on the thread that
// received the call (no hop on the fast path); one that may block runs on
// the executor's threads, so it may make nested calls without stalling
// progress.
//
// Bounded (docs/limits.md): calls waiting for an executor thread, and those
// held for a function not registered yet, number at most the limit
// max_queued_calls; one more is refused with RESOURCE_EXHAUSTED back to its
// caller, so a flood of calls costs this worker bounded memory.
#pragma once

#include "agent/executor.h"
#include "agent/worker_parts.h"
#include "wire/messages.h"
#include "wire/value.h"

#include <nlohmann/json_fwd.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ferry {

class IncomingCalls;

// What a call being served knows of its caller's side: the caller's
// deadline (the REQUEST's timeout_ms from its arrival; none for 0) and
// whether the caller gave up (a CANCEL, its deadline passed, or the caller
// died or left). Shared by the call, the table of live calls, and the
// calls a handler makes (which inherit the deadline).
struct CallState {
  std::chrono::steady_clock::time_point deadline =
      std::chrono::steady_clock::time_point::max();  // max: none
  std::atomic<bool> cancelled{false};
  // What the debug dump (IncomingCalls::DebugDump) and a nested call's
  // record of its parent (OutgoingCalls) say of the call: set when it
  // arrives, before the state is shared.
  uint64_t caller_id = 0;
  uint64_t call_id = 0;
  std::string caller_name;
  std::string function;
  std::chrono::steady_clock::time_point arrived{};
  // When its handler started (steady_clock nanoseconds; 0: still queued),
  // and whether the handler returned without answering (an async handler:
  // the answer comes later, from elsewhere).
  std::atomic<int64_t> started_ns{0};
  std::atomic<bool> handler_returned{false};
  bool has_deadline() const {
    return deadline != std::chrono::steady_clock::time_point::max();
  }
  // The caller gave up, or its deadline passed.
  bool given_up() const {
    return cancelled.load(std::memory_order_relaxed) ||
           (has_deadline() && std::chrono::steady_clock::now() >= deadline);
  }
};

// A call being served here. Answered exactly once: by Reply, by Fail, or
// (with an error) when dropped unanswered.
class IncomingCall {
 public:
  uint64_t caller_id() const { return from_.id; }
  const std::string& caller_name() const { return caller_name_; }
  const std::string& function() const { return function_; }
  // The caller's deadline (time_point::max() when it set none) and whether
  // it gave up on this call (see CallState).
  std::chrono::steady_clock::time_point deadline() const { return state_->deadline; }
  bool cancelled() const { return state_->given_up(); }
  // FAILED_PRECONDITION if answered already.
  Status Reply(Value result);
  Status Fail(Status error);
  ~IncomingCall();

 private:
  friend class IncomingCalls;
  IncomingCall() = default;
  std::shared_ptr<void> keepalive_;  // the agent, which owns `calls_`
  IncomingCalls* calls_ = nullptr;
  PeerKey from_;
  std::string caller_name_;
  std::string function_;
  uint64_t call_id_ = 0;
  wire::CallKind kind_ = wire::CallKind::kRpc;
  wire::Guid rref_;
  std::shared_ptr<CallState> state_;
  // A call from this worker to itself: answered here, not sent.
  std::function<void(Status, Value)> local_reply_;
  std::atomic<bool> answered_{false};
};

class IncomingCalls {
 public:
  // A call being served keeps `parts.owner` alive (worker_parts.h).
  explicit IncomingCalls(WorkerParts parts);

  // `handler` owns the call: it must Reply or Fail it, now or later.
  using Handler = std::function<void(std::unique_ptr<IncomingCall> call, Value args)>;
  Status Register(const std::string& function, Handler handler, bool may_block);

  // Calls for a function not registered yet are held until `until` (see
  // early_calls_).
  void HoldEarlyCallsUntil(std::chrono::steady_clock::time_point until);
  // Once that time has passed, fails the calls still held as unknown (the
  // agent's timer).
  void EndGraceIfOver();

  // A REQUEST from member `from`.
  void OnRequest(PeerKey from, InMessage& msg);
  // A CANCEL from member `from`: the call is flagged (dropped if it has not
  // started). Unknown calls are ignored (idempotent).
  void OnCancel(PeerKey from, InMessage& msg);
  // A call from this worker to itself (OutgoingCalls::SetLocal): served on
  // the executor whatever the handler's flags, so the caller returns at
  // once and its deadline holds; answered through `reply`.
  void RunLocal(uint64_t call_id, const wire::Request& req, Value args,
                std::chrono::steady_clock::time_point deadline,
                std::function<void(Status, Value)> reply);
  // This worker gave up on its call `call_id` to itself.
  void CancelLocal(uint64_t call_id);
  // Member `id` died or left: every call it made here is flagged, and
  // those still queued are dropped before they run.
  void OnCallerGone(uint64_t id);

  // The call whose handler runs on this thread now (null outside one):
  // what a nested call inherits its deadline from.
  static const CallState* Current();
  // Calls dropped unrun because their caller had given up.
  uint64_t dropped() const { return dropped_.load(); }

  // Calls received and not answered yet.
  int serving() const { return serving_.load(); }
  // Calls waiting for a handler thread (or held early) now, and those
  // refused at Limits::max_queued_calls so far.
  uint32_t queued() const { return queued_.load(); }
  uint64_t refused() const { return refused_.load(); }
  // For the debug dump (agent.h, DebugDump): every call received and not
  // answered yet (caller, function, age, queued or running and for how
  // long), the calls held for a function not registered yet, and the
  // executor's queue. Takes this part's locks one at a time.
  nlohmann::json DebugDump();
  // Shutdown, last: runs what the executor has queued, then joins it.
  void StopExecutor();

 private:
  friend class IncomingCall;
  struct HandlerEntry {
    // Shared, so that a call takes a reference to it rather than a copy of
    // the callable (a copy allocates for most lambdas).
    std::shared_ptr<const Handler> fn;
    bool may_block = false;
  };
  // Calls for a function not registered yet that arrived within the
  // registration grace of joining: a worker registers its functions right
  // after it starts, and a caller that saw it join may be quicker. They are
  // dispatched once the function is registered, or fail as unknown when
  // the grace ends.
  struct EarlyCall {
    PeerKey from;
    std::shared_ptr<InMessage> msg;
    std::string function;
  };
  enum class Lookup { kFound, kHeld, kUnknown, kQueueFull };

  // The handler for `req`; or the call is held (an early call, `msg` moved
  // away); or no such function (`known` lists those registered).
  Lookup FindHandler(PeerKey from, const wire::Request& req, InMessage& msg,
                     HandlerEntry* entry, std::string* known);
  // Answers a FETCH of an owned RRef's value once the value exists.
  void ServeFetch(PeerKey from, const wire::Request& req);
  // Runs the handler now, or on the executor if it may block (or
  // `on_executor`).
  // A served call's state, naming it (caller, call id, function, arrival).
  static std::shared_ptr<CallState> NewCallState(
      const IncomingCall& call, std::chrono::steady_clock::time_point now);
  // Records the served call in live_ (what CANCEL and DebugDump reach).
  void AddLive(const std::shared_ptr<CallState>& state);
  void Run(HandlerEntry entry, std::unique_ptr<IncomingCall> call, Value args,
           bool on_executor = false);
  // Dispatches again the early calls for `function` (all of them with an
  // empty name: the grace is over, and they fail as unknown).
  void RedispatchEarlyCalls(const std::string& function);
  // Sends the RESPONSE: `value` (handed over) or `shared` (an owner's value,
  // not copied) when `status` is OK.
  void Respond(const PeerKey& to, uint64_t call_id, Status status, Value* value,
               const std::shared_ptr<Value>& shared = nullptr);

  WorkerParts w_;
  std::unique_ptr<Executor> executor_;
  std::atomic<int> serving_{0};
  std::atomic<uint64_t> dropped_{0};
  // Calls queued for the executor or held early, and not started: at most
  // Limits::max_queued_calls (TakeQueueSlot).
  std::atomic<uint32_t> queued_{0};
  std::atomic<uint64_t> refused_{0};
  // Takes a place in the queue; false (nothing taken) when it is full.
  bool TakeQueueSlot();
  // Why a call was refused at max_queued_calls (and the log says so).
  Status QueueFull(const std::string& function);

  // The calls received and not answered yet, by (caller id, call id), for
  // CANCEL and the caller's departure to reach them.
  struct LiveKey {
    uint64_t caller, call_id;
    bool operator<(const LiveKey& o) const {
      return caller != o.caller ? caller < o.caller : call_id < o.call_id;
    }
  };
  std::mutex live_mu_;
  std::map<LiveKey, std::shared_ptr<CallState>> live_;
  void Forget(uint64_t caller, uint64_t call_id);

  std::mutex mu_;  // everything below, and executor_ against StopExecutor
  std::map<std::string, HandlerEntry> handlers_;
  std::vector<EarlyCall> early_calls_;
  std::chrono::steady_clock::time_point registration_grace_until_{};
};

}  // namespace ferry
