// ferry::Agent (agent.h): start-up and shutdown, joining the job, and the
// engine's sink — each arrival routed to the part it is for. The calling
// API (call, remote, fetch) is in agent_calls.cc.
#include "agent/agent.h"

#include "agent/debug_signal.h"
#include "common/log.h"

#include <algorithm>

namespace ferry {
namespace {
constexpr const char* kLog = "agent";
// How long after joining a call may wait for its function to be registered
// (IncomingCalls::EarlyCall).
constexpr std::chrono::seconds kRegistrationGrace{2};
}  // namespace

class Agent::WaitingFor {
 public:
  WaitingFor(Agent* agent, Waiting what) : agent_(agent) { agent_->waiting_.store(what); }
  ~WaitingFor() { agent_->waiting_.store(Waiting::kNothing); }
  WaitingFor(const WaitingFor&) = delete;
  WaitingFor& operator=(const WaitingFor&) = delete;

 private:
  Agent* agent_;
};

Agent::Agent(AgentOptions options)
    : options_(std::move(options)), members_(options_.job) {}

Agent::~Agent() {
  Shutdown(ShutdownMode::kImmediate, std::chrono::milliseconds(0));
}

StatusOr<std::shared_ptr<Agent>> Agent::Start(AgentOptions options) {
  if (options.name.empty()) {
    return Status(FERRY_INVALID_ARGUMENT, "a worker needs a name (options.name)");
  }
  if (options.name[0] == '#') {
    return Status(FERRY_INVALID_ARGUMENT,
                  "worker names may not start with '#' (that form means an id)");
  }
  if (options.store_address.empty()) {
    return Status(FERRY_INVALID_ARGUMENT,
                  "no rendezvous store address: pass one, or set FERRY_STORE=host:port "
                  "(the first worker hosts it with FERRY_WORKER_HOST_STORE)");
  }
  if (options.world_size > 0 &&
      (options.rank < 0 || static_cast<uint32_t>(options.rank) >= options.world_size)) {
    return Status(FERRY_INVALID_ARGUMENT,
                  "worker '" + options.name + "': rank " + std::to_string(options.rank) +
                      " is outside 0.." + std::to_string(options.world_size - 1) +
                      " (world_size " + std::to_string(options.world_size) + ")");
  }
  if (options.world_size == 0) options.rank = -1;
  std::shared_ptr<Agent> agent(new Agent(std::move(options)));
  Status s = agent->StartImpl();
  if (!s.ok()) {
    agent->Shutdown(ShutdownMode::kImmediate, std::chrono::milliseconds(0));
    return s;
  }
  agent->started_ = true;
  debug_signal::Watch(agent);
  return agent;
}

Status Agent::StartImpl() {
  if (options_.secret.empty()) {
    FERRY_LOG(FERRY_LOG_WARN, kLog,
              "no job secret (FERRY_SECRET or FERRY_SECRET_FILE): connections are "
              "authenticated with an empty key, so any process that can reach this "
              "worker can call it. Fine on a laptop; set a secret on a cluster.");
  }
  MakeEngine();
  Status s = engine_->Start();
  if (!s.ok()) return s;
  incoming_ = std::make_unique<IncomingCalls>(Parts());
  RegisterDebugDumpFunction();
  {
    // Calls to this worker itself run on its executor, under their deadline.
    std::weak_ptr<Agent> weak = weak_from_this();
    calls_->SetLocal(
        [weak](uint64_t call_id, const wire::Request& req, Value args,
               std::chrono::steady_clock::time_point deadline) {
          auto a = weak.lock();
          if (!a) return;
          a->incoming_->RunLocal(call_id, req, std::move(args), deadline,
                                 [weak, call_id](Status status, Value v) {
                                   if (auto b = weak.lock())
                                     b->calls_->OnLocalResponse(
                                         call_id, std::move(status), std::move(v));
                                 });
        },
        [weak](uint64_t call_id) {
          if (auto a = weak.lock()) a->incoming_->CancelLocal(call_id);
        });
  }

  self_.name = options_.name;
  self_.rank = options_.rank;
  self_.endpoints = engine_->endpoints();
  auto joined = JoinStore();
  if (!joined.ok()) return joined.status();
  self_ = joined.value().self;
  if (options_.world_size == 0) self_.rank = -1;
  engine_->SetSelf(self_.id, self_.incarnation, self_.name);
  rrefs_->SetSelf(self_.id);
  members_.Add(MemberInfo{self_.id, self_.incarnation, self_.name, MemberState::kAlive,
                          "self", self_.rank});
  if (options_.world_size > 0) {
    std::lock_guard<std::mutex> l(job_mu_);
    joined_ranks_.insert(self_.rank);
    arrived_ranks_.insert(joined.value().arrived.begin(), joined.value().arrived.end());
  }
  for (const auto& m : joined.value().members) {
    ApplyMemberEvent(wire::StoreMemberEvent{wire::MemberEventKind::kJoined, m, ""});
  }
  for (const auto& d : joined.value().departed) {
    // A static job's member that joined and left before this one joined:
    // known by name (calls to it fail with PEER_GONE, not NOT_FOUND) and
    // counted as joined.
    const MemberState state =
        d.state == wire::MemberEventKind::kGone ? MemberState::kGone : MemberState::kLeft;
    members_.Add(MemberInfo{d.member.id, d.member.incarnation, d.member.name, state, "",
                            d.member.rank});
    NoteJobEvent(wire::StoreMemberEvent{wire::MemberEventKind::kJoined, d.member, ""});
    NoteJobEvent(wire::StoreMemberEvent{d.state, d.member, ""});
  }
  AddTimers();
  engine_->StartLoop();
  FERRY_LOG(FERRY_LOG_INFO, kLog,
            "worker '" + self_.name + "' joined job '" + options_.job + "' as id " +
                std::to_string(self_.id) +
                (self_.rank >= 0 ? " rank " + std::to_string(self_.rank) + " of " +
                                       std::to_string(options_.world_size)
                                 : std::string()) +
                " (store " + store_address_ + ")");
  if (options_.world_size > 0) {
    // Calls from workers whose start returned first wait for this one's
    // functions until its start returned (and the grace after it).
    incoming_->HoldEarlyCallsUntil(std::chrono::steady_clock::now() +
                                   options_.start_timeout + kRegistrationGrace);
    Status all = WaitForAllRanks();
    if (!all.ok()) return all;
  }
  incoming_->HoldEarlyCallsUntil(std::chrono::steady_clock::now() + kRegistrationGrace);
  return Status::Ok();
}

Status Agent::WaitForAllRanks() {
  const auto deadline = std::chrono::steady_clock::now() + options_.start_timeout;
  auto all_joined = [this] {
    std::lock_guard<std::mutex> l(job_mu_);
    return joined_ranks_.size() >= options_.world_size;
  };
  WaitingFor waiting(this, Waiting::kStart);
  if (engine_->WaitUntil(all_joined, deadline)) {
    FERRY_LOG(FERRY_LOG_INFO, kLog,
              "all " + std::to_string(options_.world_size) + " workers of job '" +
                  options_.job + "' joined");
    return Status::Ok();
  }
  std::set<int32_t> have;
  {
    std::lock_guard<std::mutex> l(job_mu_);
    have = joined_ranks_;
  }
  Status late(FERRY_DEADLINE_EXCEEDED,
              "job '" + options_.job + "' is static with world_size " +
                  std::to_string(options_.world_size) + ": " + RanksMissing(have) +
                  " did not join within " +
                  std::to_string(options_.start_timeout.count()) + " ms (worker '" +
                  self_.name + "' is rank " + std::to_string(self_.rank) +
                  "): start the missing workers with the same store and job, or "
                  "raise the start timeout");
  LogDebugDump(late.message());
  return late;
}

std::string Agent::RanksMissing(const std::set<int32_t>& have) const {
  std::string out;
  for (int32_t r = 0; r < static_cast<int32_t>(options_.world_size); ++r) {
    if (have.count(r)) continue;
    if (!out.empty()) out += ", ";
    const std::string name = members_.NameOfRank(r);
    out += name.empty() ? "rank " + std::to_string(r)
                        : "'" + name + "' (rank " + std::to_string(r) + ")";
  }
  return out;
}

WorkerParts Agent::Parts() {
  return WorkerParts{options_, stopped_, weak_from_this(), *engine_,
                     *rrefs_,  *codec_,  members_};
}

void Agent::MakeEngine() {
  EngineOptions eo;
  eo.job = options_.job;
  eo.secret = options_.secret;
  eo.transports = options_.transports;
  eo.busy_poll = options_.busy_poll;
  eo.skip_unusable = options_.auto_select;
  eo.peer_timeout = options_.peer_timeout;
  eo.device_allocator = options_.device_allocator;
  eo.limits = options_.limits;
  engine_ = std::make_unique<Engine>(eo, this);
  std::weak_ptr<Agent> weak = weak_from_this();
  RRefContext::Hooks hooks;
  hooks.send_control = [weak](uint64_t to, const wire::Control& c) {
    if (auto a = weak.lock()) a->rref_messenger_->SendControl(to, c);
  };
  hooks.send_ack = [weak](uint64_t to, uint64_t id) {
    if (auto a = weak.lock()) a->rref_messenger_->QueueAck(to, id);
  };
  rrefs_ = std::make_shared<RRefContext>(std::move(hooks));
  rref_messenger_ = std::make_unique<RRefMessenger>(*engine_, *rrefs_);
  codec_ = std::make_unique<ValueCodec>(*rrefs_, engine_.get());
  calls_ = std::make_unique<OutgoingCalls>(Parts());
}

StatusOr<wire::StoreJoined> Agent::JoinStore() {
  std::weak_ptr<Agent> weak = weak_from_this();
  auto on_event = [weak](const wire::StoreMemberEvent& ev) {
    if (auto a = weak.lock()) a->ApplyMemberEvent(ev);
  };
  if (options_.host_store) {
    StoreServer::Hooks sh;
    sh.send = [weak](uint64_t conn, std::unique_ptr<OutMessage> m) {
      if (auto a = weak.lock()) a->engine_->SendOnConn(conn, std::move(m));
    };
    sh.local_event = on_event;
    store_server_ = std::make_unique<StoreServer>(std::move(sh), options_.world_size);
    Status s = engine_->ListenStore(options_.store_address, &store_address_);
    if (!s.ok()) return s;
    store_ = store_server_.get();
  } else {
    store_address_ = options_.store_address;
    // Joining pumps the engine, and a worker that heard of this one from the
    // store may call it before the join returns: its calls wait for their
    // functions until the grace after the join timeout.
    incoming_->HoldEarlyCallsUntil(std::chrono::steady_clock::now() +
                                   options_.join_timeout + kRegistrationGrace);
    StoreClient::Options so;
    so.address = options_.store_address;
    so.job = options_.job;
    so.join_timeout = options_.join_timeout;
    so.world_size = options_.world_size;
    store_client_ = std::make_unique<StoreClient>(*engine_, std::move(so), on_event);
    store_ = store_client_.get();
  }
  return store_->Join(self_);
}

void Agent::AddTimers() {
  std::weak_ptr<Agent> weak = weak_from_this();
  engine_->AddTimer(std::chrono::milliseconds(10), [weak] {
    if (auto a = weak.lock()) a->ExpireCalls();
  });
  engine_->AddTimer(std::chrono::milliseconds(1), [weak] {
    if (auto a = weak.lock()) a->rref_messenger_->FlushAcks();
  });
  engine_->AddTimer(std::chrono::milliseconds(100), [weak] {
    if (auto a = weak.lock()) a->rrefs_->Retry(std::chrono::milliseconds(200));
  });
}

void Agent::ExpireCalls() {
  incoming_->EndGraceIfOver();
  calls_->ExpireDue();
}

// ---- membership -------------------------------------------------------------

void Agent::NoteJobEvent(const wire::StoreMemberEvent& ev) {
  if (options_.world_size == 0 || ev.member.rank < 0) return;
  const int32_t rank = ev.member.rank;
  {
    std::lock_guard<std::mutex> l(job_mu_);
    switch (ev.event) {
      case wire::MemberEventKind::kJoined:
        joined_ranks_.insert(rank);
        break;
      case wire::MemberEventKind::kArrived:
        arrived_ranks_.insert(rank);
        break;
      case wire::MemberEventKind::kLeft:
      case wire::MemberEventKind::kGone:
        // The store sends a member's ARRIVED before its LEFT or GONE on the
        // same connection, so a member missing from arrived_ranks_ here
        // never reached shutdown: the barrier cannot complete any more.
        if (arrived_ranks_.count(rank) || !barrier_broken_.ok() ||
            arrived_ranks_.size() >= options_.world_size) {
          break;
        }
        barrier_broken_ = Status(
            FERRY_PEER_GONE,
            "shutdown: worker '" + ev.member.name + "' (rank " + std::to_string(rank) +
                ") " +
                (ev.event == wire::MemberEventKind::kLeft
                     ? "left without reaching shutdown (a non-graceful shutdown)"
                 : ev.reason.empty() ? "is gone before reaching shutdown"
                                     : "is gone before reaching shutdown: " + ev.reason) +
                "; the job-wide shutdown barrier of job '" + options_.job +
                "' cannot complete");
        break;
    }
  }
  engine_->NotifyWaiters();
}

void Agent::ApplyMemberEvent(const wire::StoreMemberEvent& ev) {
  const auto& r = ev.member;
  if (r.id == self_.id && self_.id != 0) return;
  NoteJobEvent(ev);
  if (ev.event == wire::MemberEventKind::kArrived) return;
  if (ev.event == wire::MemberEventKind::kJoined) {
    engine_->AddMember(r);
    const MemberInfo info{r.id, r.incarnation, r.name, MemberState::kAlive, "", r.rank};
    if (!members_.Add(info)) return;  // an older incarnation's news
    calls_->OnMemberJoined(r.name, r.id);
    members_.Notify(info);
    return;
  }
  const MemberState state =
      ev.event == wire::MemberEventKind::kLeft ? MemberState::kLeft : MemberState::kGone;
  members_.SetState(r.id, r.incarnation, state);
  engine_->RemoveMember(
      r.id,
      Status(FERRY_PEER_GONE, "worker '" + r.name + "' " +
                                  (state == MemberState::kLeft ? "left the job"
                                   : ev.reason.empty() ? "is gone (the store lost it)"
                                                       : "is gone: " + ev.reason)),
      state == MemberState::kLeft);
}

std::vector<MemberInfo> Agent::Members() {
  std::vector<MemberInfo> out = members_.List();
  for (auto& m : out) {
    if (m.id != self_.id) m.transport = engine_->RouteTo(m.id);
  }
  return out;
}

Status Agent::WaitForWorkers(size_t n, std::chrono::milliseconds timeout) {
  waiting_for_.store(n);
  WaitingFor waiting(this, Waiting::kWorkers);
  if (engine_->WaitUntil([&] { return members_.AliveCount() >= n; },
                         std::chrono::steady_clock::now() + timeout)) {
    return Status::Ok();
  }
  Status late(FERRY_DEADLINE_EXCEEDED,
              "only " + std::to_string(members_.AliveCount()) + " of " +
                  std::to_string(n) + " workers joined job '" + options_.job +
                  "' within " + std::to_string(timeout.count()) + " ms");
  LogDebugDump(late.message());
  return late;
}

void Agent::OnMembership(MemberCallback cb) {
  members_.OnChange(std::move(cb));
}

// ---- the engine's sink ----------------------------------------------------------

void Agent::OnMessage(PeerKey from, std::unique_ptr<InMessage> msg) {
  switch (msg->envelope.kind) {
    case wire::Kind::kRequest:
      incoming_->OnRequest(from, *msg);
      return;
    case wire::Kind::kResponse:
      calls_->OnResponse(from, *msg);
      return;
    case wire::Kind::kCancel:
      incoming_->OnCancel(from, *msg);
      return;
    case wire::Kind::kControl:
      rref_messenger_->OnControl(from, *msg);
      return;
    case wire::Kind::kControlAck:
      rref_messenger_->OnControlAck(from, *msg);
      return;
    default:
      FERRY_LOG(FERRY_LOG_DEBUG, kLog, "unexpected message kind ignored");
  }
}

void Agent::OnDuplicateControl(PeerKey from, const InMessage& msg) {
  rref_messenger_->OnDuplicateControl(from, msg);
}

void Agent::OnStoreMessage(uint64_t conn, std::unique_ptr<InMessage> msg) {
  const wire::Kind kind = msg->envelope.kind;
  if (kind == wire::Kind::kDebugDump) {
    if (store_server_) ServeRemoteDebugDump(conn, *msg);
    return;
  }
  if (kind == wire::Kind::kStoreJoin || kind == wire::Kind::kStoreLeave ||
      kind == wire::Kind::kStoreArrive) {
    if (store_server_) store_server_->OnMessage(conn, *msg);
    return;
  }
  // JOINED and member events answer a client; a worker hosting the store is
  // nobody's client.
  if (store_client_) store_client_->OnMessage(conn, *msg);
}

void Agent::OnStoreConnGone(uint64_t conn, const Status& why) {
  if (store_server_) {
    store_server_->OnConnGone(conn, why);
    return;
  }
  if (!store_client_) return;
  store_client_->OnConnGone(conn, why, stopped_.load());
  if (options_.world_size > 0 && store_client_->lost()) {
    {
      std::lock_guard<std::mutex> l(job_mu_);
      if (barrier_broken_.ok() && arrived_ranks_.size() < options_.world_size) {
        barrier_broken_ = Status(
            FERRY_PEER_GONE, "shutdown: lost the rendezvous store at " + store_address_ +
                                 " (" + why.message() +
                                 "): the worker hosting it is gone, so the job-wide "
                                 "shutdown barrier of job '" +
                                 options_.job + "' cannot complete");
      }
    }
    engine_->NotifyWaiters();
  }
}

void Agent::OnPeerGone(PeerKey peer, const Status& why, bool left) {
  calls_->FailCallsTo(peer.id, why);
  // Its calls here are for nobody now: dropped if queued, flagged if running.
  if (incoming_) incoming_->OnCallerGone(peer.id);
  rrefs_->OnPeerGone(peer.id);
  members_.SetState(peer.id, peer.incarnation,
                    left ? MemberState::kLeft : MemberState::kGone);
}

// ---- stats and shutdown -----------------------------------------------------------

Agent::Stats Agent::stats() {
  Stats s;
  s.rref = rrefs_->stats();
  s.pending_calls = calls_->size();
  s.dropped_calls = incoming_ ? incoming_->dropped() : 0;
  const Engine::Stats es = engine_->stats();
  s.refused_connections = es.refused;
  s.device_messages = es.device_messages;
  s.staged_messages = es.staged_messages;
  s.staged_bytes = es.staged_bytes;
  return s;
}

namespace {
std::string Duration(std::chrono::milliseconds d) {
  return d.count() % 1000 == 0 ? std::to_string(d.count() / 1000) + " s"
                               : std::to_string(d.count()) + " ms";
}
}  // namespace

Status Agent::Shutdown(ShutdownMode mode, std::chrono::milliseconds timeout) {
  if (shutting_down_.exchange(true)) return Status::Ok();
  const bool unlimited = timeout == std::chrono::milliseconds::max();
  const auto start = std::chrono::steady_clock::now();
  const auto deadline =
      unlimited ? std::chrono::steady_clock::time_point::max() : start + timeout;
  Status result;
  if (mode == ShutdownMode::kGraceful && options_.world_size > 0 && started_.load()) {
    result = Barrier(deadline, timeout);
    if (result.ok() && store_server_) {
      // The store goes with this worker: let the others hear the last
      // ARRIVED and leave first (a member that does not is lost within the
      // heartbeat timeout anyway).
      const auto others_deadline = std::min(deadline, std::chrono::steady_clock::now() +
                                                          2 * options_.peer_timeout +
                                                          std::chrono::milliseconds(500));
      engine_->WaitUntil([this] { return store_server_->AliveOthers(self_.id) == 0; },
                         others_deadline);
    }
  }
  std::chrono::milliseconds grace(0);
  if (mode == ShutdownMode::kGraceful) {
    grace = unlimited ? options_.default_timeout
                      : std::max(std::chrono::milliseconds(0),
                                 std::chrono::duration_cast<std::chrono::milliseconds>(
                                     deadline - std::chrono::steady_clock::now()));
  }
  Leave(grace);
  return result;
}

Status Agent::Barrier(std::chrono::steady_clock::time_point deadline,
                      std::chrono::milliseconds timeout) {
  auto broken = [this] {
    std::lock_guard<std::mutex> l(job_mu_);
    return barrier_broken_;
  };
  // This worker's own work first: its calls answered (a handler's nested
  // calls included) and its RRef control messages acknowledged. It keeps
  // serving meanwhile.
  WaitingFor waiting(this, Waiting::kOwnCalls);  // then kBarrier
  const bool drained = engine_->WaitUntil(
      [&] {
        return (calls_->size() == 0 && rrefs_->stats().pending_controls == 0) ||
               !broken().ok();
      },
      deadline);
  if (Status b = broken(); !b.ok()) return b;
  if (!drained) {
    Status late(FERRY_DEADLINE_EXCEEDED,
                "shutdown: worker '" + self_.name + "' (rank " +
                    std::to_string(self_.rank) + ") still had " +
                    std::to_string(calls_->size()) + " calls of its own pending after " +
                    Duration(timeout) + ", so it never reached the job-wide barrier");
    LogDebugDump(late.message());
    return late;
  }
  waiting_.store(Waiting::kBarrier);
  {
    std::lock_guard<std::mutex> l(job_mu_);
    arrived_ranks_.insert(self_.rank);
  }
  FERRY_LOG(FERRY_LOG_INFO, kLog,
            "worker '" + self_.name + "' (rank " + std::to_string(self_.rank) +
                ") reached shutdown; waiting for the others");
  store_->Arrive(self_.id);
  auto settled = [this] {
    std::lock_guard<std::mutex> l(job_mu_);
    return arrived_ranks_.size() >= options_.world_size || !barrier_broken_.ok();
  };
  engine_->WaitUntil(settled, deadline);
  std::set<int32_t> arrived;
  {
    std::lock_guard<std::mutex> l(job_mu_);
    if (arrived_ranks_.size() >= options_.world_size) return Status::Ok();
    if (!barrier_broken_.ok()) return barrier_broken_;
    arrived = arrived_ranks_;
  }
  const size_t missing = options_.world_size - arrived.size();
  Status late(FERRY_DEADLINE_EXCEEDED,
              std::string("shutdown: ") + (missing == 1 ? "worker " : "workers ") +
                  RanksMissing(arrived) + " did not reach shutdown within " +
                  Duration(timeout) + " (job '" + options_.job + "', world_size " +
                  std::to_string(options_.world_size) + ")");
  LogDebugDump(late.message());
  return late;
}

void Agent::Leave(std::chrono::milliseconds grace) {
  stopped_ = true;
  if (!engine_) return;
  const auto deadline = std::chrono::steady_clock::now() + grace;
  // Finish the calls this worker is serving (bounded by `grace`).
  {
    WaitingFor waiting(this, Waiting::kServing);
    const bool served = engine_->WaitUntil(
        [this] { return !incoming_ || incoming_->serving() == 0; }, deadline);
    if (!served && grace.count() > 0) {
      LogDebugDump("shutdown: worker '" + options_.name + "' still serves " +
                   std::to_string(incoming_->serving()) + " calls after " +
                   Duration(grace) + "; it leaves without their answers");
    }
  }
  // Release our references: drop every user fork we can (the deletes are
  // sent now), then tell the store we leave.
  if (rrefs_) {
    engine_->WaitUntil([this] { return rrefs_->stats().pending_controls == 0; },
                       std::min(deadline, std::chrono::steady_clock::now() +
                                              std::chrono::milliseconds(200)));
    rrefs_->Shutdown();
  }
  if (self_.id != 0 && store_ != nullptr) store_->Leave(self_.id);
  // Fail what we were waiting for.
  if (calls_) {
    calls_->CancelAll(Status(FERRY_CANCELLED, "worker '" + options_.name +
                                                  "' shut down before the reply came"));
  }
  engine_->Stop(std::max(std::chrono::milliseconds(100),
                         std::chrono::duration_cast<std::chrono::milliseconds>(
                             deadline - std::chrono::steady_clock::now())));
  if (incoming_) incoming_->StopExecutor();
}

}  // namespace ferry
