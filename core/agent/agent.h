// ferry::Agent: one worker of a job. The public C API
// (abi/include/ferry/ferry.h) is a thin layer over it.
//
// It composes the parts, each in its own file:
//   engine/          connections and the progress loop (Engine)
//   membership/      the rendezvous store (RendezvousStore: StoreServer when
//                    this worker hosts it, else StoreClient) and the
//                    MemberTable it feeds
//   rref/            the RRef protocol's state (RRefContext), whose messages
//                    RRefMessenger carries
//   agent/           ValueCodec (values in messages), OutgoingCalls (calls
//                    waiting for replies), IncomingCalls (registered
//                    functions, calls being served)
// and is the engine's sink: it starts and stops them, routes each arriving
// message to the part it is for, and applies the store's member events to
// the engine, the member table and the calls waiting for a name.
//
// It also answers for all of them when a person asks what the worker is
// doing (DebugDump, agent_debug.cc; docs/debugging.md): from the C API, a
// signal (debug_signal.h), a wait that passes its timeout, and another
// process through the job's store (debug_client.h).
//
// Locks: the Agent has none of its own. Each part has its own mutex and
// never holds it while calling into another part, except that
// IncomingCalls::Register adds an engine timer and OutgoingCalls undoes an
// RRef fork under their locks: the order is always part -> Engine or
// RRefContext, never back (those call the agent only without their locks).
#pragma once

#include "agent/future.h"
#include "agent/incoming_calls.h"
#include "agent/options.h"
#include "agent/outgoing_calls.h"
#include "agent/rref_messenger.h"
#include "agent/value_codec.h"
#include "agent/worker_parts.h"
#include "common/status.h"
#include "engine/engine.h"
#include "membership/member_table.h"
#include "membership/store.h"
#include "membership/store_client.h"
#include "membership/store_server.h"
#include "rref/rref_context.h"
#include "wire/value.h"

#include <nlohmann/json_fwd.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace ferry {

class Agent : public EngineSink, public std::enable_shared_from_this<Agent> {
 public:
  // Starts the engine, hosts or joins the store, starts the loop.
  static StatusOr<std::shared_ptr<Agent>> Start(AgentOptions options);
  ~Agent() override;

  // How a worker leaves (ferry.h, ferry_worker_shutdown_ex). kGraceful: in
  // a static job the job-wide barrier first (docs/membership.md), then this
  // worker's own leave; in an elastic job only the leave. kImmediate: the
  // leave without waiting for anything.
  enum class ShutdownMode { kGraceful, kImmediate };
  // `timeout`: milliseconds::max() = no limit. Idempotent (a second call
  // returns OK at once).
  Status Shutdown(ShutdownMode mode, std::chrono::milliseconds timeout);
  // Graceful, bounded by `grace` (ferry_worker_shutdown).
  Status Shutdown(std::chrono::milliseconds grace) {
    return Shutdown(ShutdownMode::kGraceful, grace);
  }

  uint64_t id() const { return self_.id; }
  // A static job's rank and world size; -1 and 0 in an elastic job.
  int32_t rank() const { return self_.rank; }
  uint32_t world_size() const { return options_.world_size; }
  uint64_t incarnation() const { return self_.incarnation; }
  const std::string& name() const { return options_.name; }
  const std::string& store_address() const { return store_address_; }
  Engine& engine() { return *engine_; }
  RRefContext& rrefs() { return *rrefs_; }
  std::chrono::milliseconds default_timeout() const { return options_.default_timeout; }

  // `handler` owns the call: it must Reply or Fail it, now or later.
  using Handler = IncomingCalls::Handler;
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
  using MemberCallback = MemberTable::Callback;
  void OnMembership(MemberCallback cb);

  struct Stats {
    RRefContext::Stats rref;
    uint64_t pending_calls = 0;
    uint64_t dropped_calls = 0;  // served calls dropped unrun: caller gave up
    uint64_t refused_connections = 0;
    uint64_t device_messages = 0;  // over a device transport
    uint64_t staged_messages = 0;  // device tensors staged through host memory
    uint64_t staged_bytes = 0;
  };
  Stats stats();

  // What this worker is doing, for a person finding out why a job hangs
  // (docs/debugging.md): its identity; the calls it waits for (callee,
  // function, age, deadline, the served call each nested call was made
  // from); the calls it serves (caller, function, queued or running and
  // for how long); its RRefs; its peers and transports; in a static job,
  // the start's and the shutdown barrier's state; and "blocked_on": one
  // line per thing it waits for, in words ("the shutdown barrier waits for
  // 'w2' (rank 2)", "handler 'f' (called by 'w0') waits on its call to
  // w3.g"). Takes each part's lock briefly, never two at once. Works at any
  // time, during and after shutdown too.
  nlohmann::json DebugDump();
  // The reserved function every worker serves its DebugDump() as (JSON
  // text, in the reply's bytes).
  static constexpr const char* kDebugDumpFunction = "ferry.debug_dump";
  // Writes DebugDump() to the log (warn level) after `why`: what a wait
  // does when it passes its timeout, before it gives up.
  void LogDebugDump(const std::string& why);
  const std::string& job() const { return options_.job; }

  // EngineSink
  void OnMessage(PeerKey from, std::unique_ptr<InMessage> msg) override;
  void OnDuplicateControl(PeerKey from, const InMessage& msg) override;
  void OnStoreMessage(uint64_t conn, std::unique_ptr<InMessage> msg) override;
  void OnPeerGone(PeerKey peer, const Status& why, bool left) override;
  void OnStoreConnGone(uint64_t conn, const Status& why) override;

 private:
  explicit Agent(AgentOptions options);
  Status StartImpl();
  // Makes the engine, the RRef context and the parts that need only them.
  void MakeEngine();
  // What the call tables share of this worker (worker_parts.h).
  WorkerParts Parts();
  // Hosts the job's store or becomes a client of it, and joins it.
  StatusOr<wire::StoreJoined> JoinStore();
  // The periodic jobs: call deadlines, acknowledgements, RRef retries.
  void AddTimers();
  void ApplyMemberEvent(const wire::StoreMemberEvent& ev);
  // A static job's bookkeeping of a member event (ranks joined, arrived at
  // shutdown, lost before it).
  void NoteJobEvent(const wire::StoreMemberEvent& ev);
  // A static job's start: waits until every rank joined.
  Status WaitForAllRanks();
  // A static job's shutdown barrier (docs/membership.md).
  Status Barrier(std::chrono::steady_clock::time_point deadline,
                 std::chrono::milliseconds timeout);
  // "'w2' (rank 2), rank 3" for the ranks of 0..world_size-1 not in `have`.
  std::string RanksMissing(const std::set<int32_t>& have) const;
  // This worker's own leave: stop serving, release RRefs, tell the store,
  // close. `grace` bounds the wait for the calls it is serving.
  void Leave(std::chrono::milliseconds grace);
  // The call-deadline timer: the early calls' grace, then the deadlines.
  void ExpireCalls();
  // What a thread of the application waits for in this worker now (one
  // at a time is shown; DebugDump reads it).
  enum class Waiting {
    kNothing,
    kStart,     // a static job's start: every rank to join
    kWorkers,   // WaitForWorkers(waiting_for_)
    kOwnCalls,  // shutdown: this worker's own calls, before the barrier
    kBarrier,   // shutdown: the job-wide barrier
    kServing,   // the leave: the calls this worker serves
  };
  // Sets waiting_ for the life of one wait.
  class WaitingFor;
  // DebugDump's pieces (agent_debug.cc).
  // `ferry debug dump` from another process (docs/debugging.md): every
  // worker serves its own dump as kDebugDumpFunction; the worker hosting the store
  // answers a DEBUG_DUMP on an authenticated store connection with its own, or a member's
  // through that function.
  void RegisterDebugDumpFunction();
  void ServeRemoteDebugDump(uint64_t conn, const InMessage& msg);
  void ReplyDebugDump(uint64_t conn, const Status& status, const std::string& text);
  nlohmann::json DumpWorker();
  nlohmann::json DumpJob();
  std::map<uint64_t, std::string> NamesById();

  AgentOptions options_;
  std::unique_ptr<Engine> engine_;
  std::shared_ptr<RRefContext> rrefs_;
  std::unique_ptr<RRefMessenger> rref_messenger_;
  std::unique_ptr<ValueCodec> codec_;
  MemberTable members_;
  std::unique_ptr<OutgoingCalls> calls_;
  // Made once the engine started (it starts the executor's threads).
  std::unique_ptr<IncomingCalls> incoming_;
  std::unique_ptr<StoreServer> store_server_;  // when this worker hosts it
  std::unique_ptr<StoreClient> store_client_;  // when another worker does
  RendezvousStore* store_ = nullptr;           // the one of the two joined
  wire::MemberRecord self_;
  std::string store_address_;
  std::atomic<bool> stopped_{false};
  std::atomic<bool> shutting_down_{false};
  std::atomic<bool> started_{false};  // Start succeeded

  // A static job's state, as the store's news tells it (job_mu_ guards it).
  std::mutex job_mu_;
  std::set<int32_t> joined_ranks_;   // ever joined (leaving does not undo it)
  std::set<int32_t> arrived_ranks_;  // reached the shutdown barrier
  Status barrier_broken_;            // the first member lost before arriving

  std::atomic<Waiting> waiting_{Waiting::kNothing};
  std::atomic<size_t> waiting_for_{0};  // kWorkers: how many
};

}  // namespace ferry
