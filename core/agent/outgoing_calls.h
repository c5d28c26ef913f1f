// ferry::OutgoingCalls: the calls this worker made and is waiting for. Each
// pending call has a future, a deadline, and until it is sent its message.
// A call to a name no member has joined with yet waits, encoded once the
// member is known (RRef forks need the destination). Each call ends exactly
// once: its response, its deadline, its peer gone, or this worker's
// shutdown. Back-pressure (docs/limits.md): a call to a peer that already
// has max_calls_in_flight_per_peer calls in flight, or
// max_queued_bytes_per_connection bytes not yet written, waits in Start for
// room, within its deadline.
#pragma once

#include "agent/future.h"
#include "agent/worker_parts.h"
#include "wire/messages.h"
#include "wire/value.h"

#include <nlohmann/json_fwd.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ferry {

class OutgoingCalls {
 public:
  // A future keeps `parts.owner` alive (worker_parts.h).
  explicit OutgoingCalls(WorkerParts parts);

  // Called once with a call's outcome, before its future completes (remote()
  // confirms or abandons its fork with it).
  using OnSettled = std::function<void(const Status&)>;
  // Sends `req` with `args` to `to` (a member name or "#<id>"); timeout 0
  // means the default. The future fails at once for a bad destination.
  std::shared_ptr<Future> Start(const std::string& to, wire::Request req, Value args,
                                std::chrono::milliseconds timeout, OnSettled on_settled);
  // Calls to this worker itself: `dispatch` serves one here (on the
  // executor), answering through OnLocalResponse; `cancel` flags one the
  // caller gave up on. Set once by the agent before it serves.
  using LocalDispatch =
      std::function<void(uint64_t call_id, const wire::Request& req, Value args,
                         std::chrono::steady_clock::time_point deadline)>;
  void SetLocal(LocalDispatch dispatch, std::function<void(uint64_t call_id)> cancel);
  void OnLocalResponse(uint64_t call_id, Status status, Value value);
  // A member joined under `name` as `id`: the calls waiting for it go.
  void OnMemberJoined(const std::string& name, uint64_t id);
  void OnResponse(PeerKey from, InMessage& msg);
  // Fails the calls whose deadline passed (the agent's timer); the callee
  // of each one sent is told (CANCEL).
  void ExpireDue();
  // The caller cancelled call `call_id` (Future::Cancel): it fails with
  // CANCELLED and, if it was sent, its callee is told (CANCEL).
  void Cancel(uint64_t call_id);
  // Member `id` is gone: its calls fail with `why`.
  void FailCallsTo(uint64_t id, const Status& why);
  // Shutdown: every pending call's future completes with `why` (on_settled
  // is not called: the RRef context has been shut down first).
  void CancelAll(const Status& why);
  size_t size();
  // For the debug dump (agent.h, DebugDump): every pending call (callee,
  // function, age, deadline, whether it was sent, and the served call it
  // was made from when it is a nested call). Takes this part's lock.
  nlohmann::json DebugDump();
  // For the debug dump: per callee with calls waiting in Start for room
  // (WaitForRoom), how many wait and how many are in flight.
  nlohmann::json WaitingForRoom();
  // NOT_FOUND for a name no member of this static job has, listing them.
  Status UnknownInStaticJob(const std::string& to) const;

 private:
  struct PendingCall {
    std::shared_ptr<Future> future;
    uint64_t to = 0;  // 0 while the name is not known yet
    std::string to_name;
    std::chrono::steady_clock::time_point deadline;
    std::unique_ptr<OutMessage> unsent;  // waiting for `to_name` to join
    std::vector<wire::RRefRef> forks;    // to undo if never sent
    OnSettled on_settled;                // remote(): confirm/abandon
    bool local = false;                  // to this worker itself
    bool counted = false;                // in in_flight_[to]
    // For the debug dump: what was called, when, and from which served
    // call (a nested call: parent_function is not empty).
    std::string function;
    std::chrono::steady_clock::time_point started;
    std::string parent_caller;
    std::string parent_function;
    uint64_t parent_call_id = 0;
  };
  // Fills the debug dump's fields of `pc` (the served call running on this
  // thread, if any, is its parent).
  static void Describe(PendingCall& pc, const std::string& function);

  // The request message for `pc`, encoded now if its destination is known,
  // else made to encode itself once it is (OutMessage::deferred).
  Status BuildMessage(PendingCall& pc, wire::Request req, Value args);
  void SendPending(uint64_t call_id);
  // A call to this worker itself: pending here, served by local_dispatch_.
  std::shared_ptr<Future> StartLocal(std::shared_ptr<Future> future,
                                     const std::string& to, wire::Request req, Value args,
                                     std::chrono::steady_clock::time_point deadline);
  // Waits (pumping) until a call to member `to` fits its limits, and takes
  // its place in in_flight_; DEADLINE_EXCEEDED naming the limit that held
  // it when `deadline` passes first.
  Status WaitForRoom(uint64_t to, const std::string& name,
                     std::chrono::steady_clock::time_point deadline);
  // Under mu_: counts `pc` to its callee / gives its place back.
  void CountLocked(PendingCall& pc);
  void UncountLocked(PendingCall& pc);
  // Tells member `to` that this worker gave up on its call `call_id`. Best
  // effort: never retried (a lost CANCEL costs only work; the callee's own
  // copy of the deadline ends the call there too).
  void SendCancel(uint64_t to, uint64_t call_id, wire::CancelReason why);

  WorkerParts w_;
  LocalDispatch local_dispatch_;
  std::function<void(uint64_t)> local_cancel_;

  std::mutex mu_;  // everything below
  std::map<uint64_t, PendingCall> calls_;
  // Calls in flight per callee id (sent or about to be; not those waiting
  // for a name to join, nor calls to this worker itself).
  std::map<uint64_t, uint32_t> in_flight_;
  // Calls waiting in WaitForRoom, per callee id.
  std::map<uint64_t, uint32_t> waiting_for_room_;
  // No pending call's deadline is earlier than this (it may be earlier
  // than any: a call that set it may have been answered since). The expiry
  // timer scans calls_ only once it has passed, so 100 000 calls in flight
  // cost a scan per deadline that could be due, not one every tick.
  std::chrono::steady_clock::time_point earliest_deadline_ =
      std::chrono::steady_clock::time_point::max();
  uint64_t next_call_id_ = 1;
};

}  // namespace ferry
