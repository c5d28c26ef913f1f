// ferry::Agent: one worker of a job — membership, registered functions,
// outgoing and incoming calls, and the RRef context — over an Engine.
// The public C API (abi/include/ferry/ferry.h) is a thin layer over it.
#pragma once

#include "agent/executor.h"
#include "agent/future.h"
#include "agent/value.h"
#include "common/status.h"
#include "engine/engine.h"
#include "membership/store_server.h"
#include "rref/rref_context.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ferry {

struct AgentOptions {
  std::string name;
  std::string job = "default";
  std::vector<std::string> transports{"tcp"};  // or every plugin for "auto"
  bool auto_select = false;  // "auto": skip plugins that do not open here
  std::string store_address;
  bool host_store = false;
  std::string secret;
  bool busy_poll = false;
  std::chrono::milliseconds default_timeout{30000};
  std::chrono::milliseconds peer_timeout{3000};
  std::chrono::milliseconds join_timeout{10000};
  unsigned executor_threads = 4;
};

enum class MemberState { kAlive = 1, kLeft = 2, kGone = 3 };

struct MemberInfo {
  uint64_t id = 0;
  uint64_t incarnation = 0;
  std::string name;
  MemberState state = MemberState::kAlive;
  std::string transport;  // "self", a plugin name, or "" (not connected)
};

class Agent;

// A call being served here (a ferry_call_t). Answered exactly once.
class IncomingCall {
 public:
  uint64_t caller_id() const { return from_.id; }
  const std::string& caller_name() const { return caller_name_; }
  const std::string& function() const { return function_; }
  // FAILED_PRECONDITION if answered already.
  Status Reply(Value result);
  Status Fail(Status error);
  ~IncomingCall();

 private:
  friend class Agent;
  IncomingCall() = default;
  std::shared_ptr<Agent> agent_;
  PeerKey from_;
  std::string caller_name_;
  std::string function_;
  uint64_t call_id_ = 0;
  wire::CallKind kind_ = wire::CallKind::kRpc;
  wire::Guid rref_;
  std::atomic<bool> answered_{false};
};

class Agent : public EngineSink, public std::enable_shared_from_this<Agent> {
 public:
  // Starts the engine, hosts or joins the store, starts the loop.
  static StatusOr<std::shared_ptr<Agent>> Start(AgentOptions options);
  ~Agent() override;

  // Graceful leave (ferry.h, ferry_worker_shutdown). Idempotent.
  Status Shutdown(std::chrono::milliseconds grace);

  uint64_t id() const { return self_.id; }
  uint64_t incarnation() const { return self_.incarnation; }
  const std::string& name() const { return options_.name; }
  const std::string& store_address() const { return store_address_; }
  Engine& engine() { return *engine_; }
  RRefContext& rrefs() { return *rrefs_; }
  std::chrono::milliseconds default_timeout() const { return options_.default_timeout; }

  // `handler` owns the call: it must Reply or Fail it, now or later.
  using Handler = std::function<void(std::unique_ptr<IncomingCall> call, Value args)>;
  Status Register(const std::string& function, Handler handler, bool may_block);

  // `to` is a member name or "#<id>". timeout 0 = default.
  std::shared_ptr<Future> Call(const std::string& to, const std::string& function,
                               Value args, std::chrono::milliseconds timeout);
  StatusOr<std::shared_ptr<RRefHandle>> Remote(const std::string& to,
                                               const std::string& function, Value args,
                                               std::chrono::milliseconds timeout);
  // to_here: a copy of the value (from the owner, or locally).
  std::shared_ptr<Future> Fetch(const std::shared_ptr<RRefHandle>& rref,
                                std::chrono::milliseconds timeout);
  std::shared_ptr<RRefHandle> CreateRRef(Value value);
  // Owner only: waits for a remote() value still being computed.
  StatusOr<std::shared_ptr<Value>> LocalValue(const RRefHandle& rref,
                                              std::chrono::milliseconds timeout);

  std::vector<MemberInfo> Members();
  Status WaitForWorkers(size_t n, std::chrono::milliseconds timeout);
  using MemberCallback = std::function<void(const MemberInfo&)>;
  void OnMembership(MemberCallback cb);

  struct Stats {
    RRefContext::Stats rref;
    uint64_t pending_calls = 0;
    uint64_t refused_connections = 0;
  };
  Stats stats();

  // EngineSink
  void OnMessage(PeerKey from, std::unique_ptr<InMessage> msg) override;
  void OnDuplicateControl(PeerKey from, const InMessage& msg) override;
  void OnStoreMessage(uint64_t conn, std::unique_ptr<InMessage> msg) override;
  void OnPeerGone(PeerKey peer, const Status& why, bool left) override;
  void OnStoreConnGone(uint64_t conn, const Status& why) override;

 private:
  friend class IncomingCall;
  struct PendingCall {
    std::shared_ptr<Future> future;
    uint64_t to = 0;              // 0 while the name is not known yet
    std::string to_name;
    std::chrono::steady_clock::time_point deadline;
    std::unique_ptr<OutMessage> unsent;  // waiting for `to_name` to join
    std::vector<wire::RRefRef> forks;    // to undo if never sent
    std::function<void(const Status&)> on_settled;  // remote(): confirm/abandon
  };
  struct HandlerEntry {
    // Shared, so that a call takes a reference to it rather than a copy of
    // the callable (a copy allocates for most lambdas).
    std::shared_ptr<const Handler> fn;
    bool may_block = false;
  };

  explicit Agent(AgentOptions options);
  Status StartImpl();
  Status JoinStore();
  Status TryJoinStore(std::chrono::steady_clock::time_point deadline);
  void ApplyMemberEvent(const wire::StoreMemberEvent& ev);
  void SetMemberState(uint64_t id, uint64_t incarnation, MemberState state);
  StatusOr<uint64_t> Resolve(const std::string& to);
  // Encodes `v` for member `to` into `msg` (tensors move into it, RRefs
  // are forked); `meta` receives the description.
  Status EncodeValue(Value& v, uint64_t to, wire::ValueMeta* meta, OutMessage* msg,
                     std::vector<wire::RRefRef>* forks);
  Status EncodeParts(Value& v, bool hand_over_tensors, uint64_t to,
                     wire::ValueMeta* meta, OutMessage* msg,
                     std::vector<wire::RRefRef>* forks);
  Status EncodeShared(const std::shared_ptr<Value>& v, uint64_t to,
                      wire::ValueMeta* meta, OutMessage* msg,
                      std::vector<wire::RRefRef>* forks);
  StatusOr<Value> DecodeValue(uint64_t from, wire::ValueMeta& meta, InMessage& msg);
  std::shared_ptr<Future> StartCall(const std::string& to, wire::Request req,
                                    Value args, std::chrono::milliseconds timeout,
                                    std::function<void(const Status&)> on_settled);
  void SendPending(uint64_t call_id);
  void OnRequest(PeerKey from, InMessage& msg);
  void OnResponse(PeerKey from, InMessage& msg);
  void Respond(const PeerKey& to, uint64_t call_id, Status status, Value* value,
               const std::shared_ptr<Value>& shared = nullptr);
  void ExpireCalls();
  // Dispatches again the early calls for `function` (all of them with an
  // empty name: the grace is over, and they fail as unknown).
  void RedispatchEarlyCalls(const std::string& function);
  void FailCallsTo(uint64_t id, const Status& why);
  void SendControl(uint64_t to, const wire::Control& c);
  // Acknowledgements are batched: queued here, sent as one CONTROL_ACK per
  // peer by a 1 ms timer (a lost one is covered by the sender's retry).
  void SendControlAck(uint64_t to, uint64_t control_id);
  void FlushControlAcks();
  void EmitMember(const MemberInfo& m);

  AgentOptions options_;
  std::unique_ptr<Engine> engine_;
  std::shared_ptr<RRefContext> rrefs_;
  std::unique_ptr<StoreServer> store_;  // when this worker hosts it
  std::unique_ptr<Executor> executor_;
  wire::MemberRecord self_;
  std::string store_address_;
  uint64_t store_conn_ = 0;
  std::atomic<bool> stopped_{false};
  std::atomic<int> serving_{0};  // incoming calls not answered yet

  std::mutex mu_;  // everything below
  std::map<std::string, HandlerEntry> handlers_;
  // Calls for a function not registered yet that arrived within
  // kRegistrationGrace of joining: a worker registers its functions right
  // after it starts, and a caller that saw it join may be quicker. They are
  // dispatched once the function is registered, or fail as unknown when
  // the grace ends.
  struct EarlyCall {
    PeerKey from;
    std::shared_ptr<InMessage> msg;
    std::string function;
  };
  std::vector<EarlyCall> early_calls_;
  std::chrono::steady_clock::time_point registration_grace_until_{};
  std::map<uint64_t, PendingCall> calls_;
  // No pending call's deadline is earlier than this (it may be earlier
  // than any: a call that set it may have been answered since). The expiry
  // timer scans calls_ only once it has passed, so 100 000 calls in flight
  // cost a scan per deadline that could be due, not one every tick.
  std::chrono::steady_clock::time_point earliest_deadline_ =
      std::chrono::steady_clock::time_point::max();
  uint64_t next_call_id_ = 1;
  std::map<uint64_t, MemberInfo> members_;
  std::map<std::string, uint64_t> ids_by_name_;
  std::vector<MemberCallback> member_callbacks_;
  std::map<uint64_t, std::vector<uint64_t>> acks_to_send_;
  bool join_answered_ = false;
  wire::StoreJoined join_reply_;
  Status store_status_;
};

}  // namespace ferry
