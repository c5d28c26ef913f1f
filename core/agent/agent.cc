// ferry::Agent (agent.h): start-up, membership and the store, and the
// glue between the engine and the RRef context. Calls live in
// agent_calls.cc.
#include "agent/agent.h"

#include "common/log.h"

#include <algorithm>
#include <thread>

namespace ferry {
namespace {
constexpr const char* kLog = "agent";
// How long after joining a call may wait for its function to be registered
// (agent.h, early_calls_).
constexpr std::chrono::seconds kRegistrationGrace{2};
}

Agent::Agent(AgentOptions options) : options_(std::move(options)) {}

Agent::~Agent() { Shutdown(std::chrono::milliseconds(0)); }

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
  std::shared_ptr<Agent> agent(new Agent(std::move(options)));
  Status s = agent->StartImpl();
  if (!s.ok()) {
    agent->Shutdown(std::chrono::milliseconds(0));
    return s;
  }
  return agent;
}

Status Agent::StartImpl() {
  if (options_.secret.empty()) {
    FERRY_LOG(FERRY_LOG_WARN, kLog,
              "no job secret (FERRY_SECRET or FERRY_SECRET_FILE): connections are "
              "authenticated with an empty key, so any process that can reach this "
              "worker can call it. Fine on a laptop; set a secret on a cluster.");
  }
  EngineOptions eo;
  eo.job = options_.job;
  eo.secret = options_.secret;
  eo.transports = options_.transports;
  eo.busy_poll = options_.busy_poll;
  eo.skip_unusable = options_.auto_select;
  eo.peer_timeout = options_.peer_timeout;
  engine_ = std::make_unique<Engine>(eo, this);
  std::weak_ptr<Agent> weak = weak_from_this();
  RRefContext::Hooks hooks;
  hooks.send_control = [weak](uint64_t to, const wire::Control& c) {
    if (auto a = weak.lock()) a->SendControl(to, c);
  };
  hooks.send_ack = [weak](uint64_t to, uint64_t id) {
    if (auto a = weak.lock()) a->SendControlAck(to, id);
  };
  rrefs_ = std::make_shared<RRefContext>(std::move(hooks));
  Status s = engine_->Start();
  if (!s.ok()) return s;
  executor_ = std::make_unique<Executor>(std::max(1u, options_.executor_threads));

  self_.name = options_.name;
  self_.endpoints = engine_->endpoints();
  if (options_.host_store) {
    StoreServer::Hooks sh;
    sh.send = [weak](uint64_t conn, wire::Kind kind, std::vector<uint8_t> body) {
      auto a = weak.lock();
      if (!a) return;
      auto m = std::make_unique<OutMessage>();
      m->kind = kind;
      m->body = std::move(body);
      a->engine_->SendOnConn(conn, std::move(m));
    };
    sh.local_event = [weak](const wire::StoreMemberEvent& ev) {
      if (auto a = weak.lock()) a->ApplyMemberEvent(ev);
    };
    store_ = std::make_unique<StoreServer>(std::move(sh));
    s = engine_->ListenStore(options_.store_address, &store_address_);
    if (!s.ok()) return s;
    wire::StoreJoined joined = store_->JoinLocal(self_);
    if (joined.status != FERRY_OK) return Status(joined.status, joined.message);
    join_reply_ = joined;
  } else {
    store_address_ = options_.store_address;
    s = JoinStore();
    if (!s.ok()) return s;
  }
  self_ = join_reply_.self;
  engine_->SetSelf(self_.id, self_.incarnation, self_.name);
  rrefs_->SetSelf(self_.id);
  {
    std::lock_guard<std::mutex> l(mu_);
    members_[self_.id] = MemberInfo{self_.id, self_.incarnation, self_.name,
                                    MemberState::kAlive, "self"};
    ids_by_name_[self_.name] = self_.id;
  }
  for (const auto& m : join_reply_.members) {
    ApplyMemberEvent(wire::StoreMemberEvent{wire::MemberEventKind::kJoined, m, ""});
  }
  engine_->AddTimer(std::chrono::milliseconds(10), [weak] {
    if (auto a = weak.lock()) a->ExpireCalls();
  });
  engine_->AddTimer(std::chrono::milliseconds(1), [weak] {
    if (auto a = weak.lock()) a->FlushControlAcks();
  });
  engine_->AddTimer(std::chrono::milliseconds(100), [weak] {
    if (auto a = weak.lock()) a->rrefs_->Retry(std::chrono::milliseconds(200));
  });
  {
    std::lock_guard<std::mutex> l(mu_);
    registration_grace_until_ = std::chrono::steady_clock::now() + kRegistrationGrace;
  }
  engine_->StartLoop();
  FERRY_LOG(FERRY_LOG_INFO, kLog,
            "worker '" + self_.name + "' joined job '" + options_.job + "' as id " +
                std::to_string(self_.id) + " (store " + store_address_ + ")");
  return Status::Ok();
}

Status Agent::JoinStore() {
  {
    std::lock_guard<std::mutex> l(mu_);
    registration_grace_until_ =
        std::chrono::steady_clock::now() + options_.join_timeout + kRegistrationGrace;
  }
  // Workers of a job are often started together, the store's host among
  // them: a store not listening yet is retried (with back-off) until the
  // join timeout, as torch's TCPStore clients do. A store that answers and
  // refuses (name taken, bad secret) is not retried.
  const auto deadline = std::chrono::steady_clock::now() + options_.join_timeout;
  auto backoff = std::chrono::milliseconds(10);
  while (true) {
    Status s = TryJoinStore(deadline);
    const bool unreachable = s.code() == FERRY_UNAVAILABLE || s.code() == FERRY_PEER_GONE;
    if (s.ok() || !unreachable || std::chrono::steady_clock::now() + backoff >= deadline) {
      return s;
    }
    FERRY_LOG(FERRY_LOG_DEBUG, kLog, s.message() + "; retrying");
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
    std::lock_guard<std::mutex> l(mu_);
    store_status_ = Status::Ok();
  }
}

Status Agent::TryJoinStore(std::chrono::steady_clock::time_point deadline) {
  auto conn = engine_->ConnectStore(options_.store_address);
  if (!conn.ok()) return conn.status();
  {
    std::lock_guard<std::mutex> l(mu_);
    store_conn_ = conn.value();
  }
  auto m = std::make_unique<OutMessage>();
  m->kind = wire::Kind::kStoreJoin;
  wire::Writer w(&m->body);
  wire::Put(w, self_);
  Status s = engine_->SendOnConn(store_conn_, std::move(m));
  if (!s.ok()) return s;
  engine_->WaitUntil(
      [this] {
        std::lock_guard<std::mutex> l(mu_);
        return join_answered_ || !store_status_.ok();
      },
      deadline);
  std::lock_guard<std::mutex> l(mu_);
  if (!store_status_.ok()) {
    return Status(store_status_.code(),
                  "cannot join job '" + options_.job + "': " + store_status_.message());
  }
  if (!join_answered_) {
    return Status(FERRY_DEADLINE_EXCEEDED,
                  "the rendezvous store at " + options_.store_address +
                      " did not answer within " +
                      std::to_string(options_.join_timeout.count()) +
                      " ms: is the worker hosting it running and reachable?");
  }
  if (join_reply_.status != FERRY_OK) {
    return Status(join_reply_.status, join_reply_.message);
  }
  return Status::Ok();
}

void Agent::OnStoreMessage(uint64_t conn, std::unique_ptr<InMessage> msg) {
  const wire::Kind kind = msg->envelope.kind;
  if (kind == wire::Kind::kStoreJoin || kind == wire::Kind::kStoreLeave) {
    if (store_) store_->OnMessage(conn, *msg);
    return;
  }
  wire::Reader r(msg->body.data(), msg->body.size());
  if (kind == wire::Kind::kStoreJoined) {
    wire::StoreJoined reply;
    if (!wire::Get(r, &reply)) return;
    std::lock_guard<std::mutex> l(mu_);
    join_reply_ = std::move(reply);
    join_answered_ = true;
    return;
  }
  if (kind == wire::Kind::kStoreMemberEvent) {
    wire::StoreMemberEvent ev;
    const uint8_t k = r.U8();
    if (!wire::Get(r, &ev.member) || k < 1 || k > 3) return;
    ev.reason = r.Str(64 * 1024);
    if (!r.ok()) return;
    ev.event = static_cast<wire::MemberEventKind>(k);
    ApplyMemberEvent(ev);
  }
}

void Agent::OnStoreConnGone(uint64_t conn, const Status& why) {
  if (store_) {
    store_->OnConnGone(conn, why);
    return;
  }
  bool joined;
  {
    std::lock_guard<std::mutex> l(mu_);
    joined = join_answered_;
    // An earlier, failed attempt's connection (JoinStore retries) says
    // nothing about the current one; ids only grow.
    if (!joined && conn >= store_conn_) store_status_ = why;
  }
  if (joined && !stopped_.load()) {
    FERRY_LOG(FERRY_LOG_WARN, kLog,
              "lost the rendezvous store at " + store_address_ + " (" + why.message() +
                  "): the workers already known keep working with each other; "
                  "workers that join from now on are not seen (see docs/membership.md)");
  }
}

void Agent::ApplyMemberEvent(const wire::StoreMemberEvent& ev) {
  const auto& r = ev.member;
  if (r.id == self_.id && self_.id != 0) return;
  if (ev.event == wire::MemberEventKind::kJoined) {
    engine_->AddMember(r);
    MemberInfo info{r.id, r.incarnation, r.name, MemberState::kAlive, ""};
    std::vector<uint64_t> ready;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = members_.find(r.id);
      if (it != members_.end() && it->second.incarnation > r.incarnation) return;
      members_[r.id] = info;
      ids_by_name_[r.name] = r.id;
      for (auto& [id, c] : calls_) {
        if (c.to == 0 && c.to_name == r.name) {
          c.to = r.id;
          ready.push_back(id);
        }
      }
    }
    for (uint64_t id : ready) SendPending(id);
    EmitMember(info);
    return;
  }
  const MemberState state = ev.event == wire::MemberEventKind::kLeft
                                ? MemberState::kLeft : MemberState::kGone;
  SetMemberState(r.id, r.incarnation, state);
  engine_->RemoveMember(r.id,
                        Status(FERRY_PEER_GONE,
                               "worker '" + r.name + "' " +
                                   (state == MemberState::kLeft ? "left the job"
                                    : ev.reason.empty()
                                        ? "is gone (the store lost it)"
                                        : "is gone: " + ev.reason)),
                        state == MemberState::kLeft);
}

void Agent::SetMemberState(uint64_t id, uint64_t incarnation, MemberState state) {
  MemberInfo info;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = members_.find(id);
    if (it == members_.end() || it->second.incarnation != incarnation ||
        it->second.state != MemberState::kAlive) {
      return;
    }
    it->second.state = state;
    info = it->second;
  }
  EmitMember(info);
}

void Agent::EmitMember(const MemberInfo& m) {
  std::vector<MemberCallback> cbs;
  {
    std::lock_guard<std::mutex> l(mu_);
    cbs = member_callbacks_;
  }
  for (auto& cb : cbs) cb(m);
}

void Agent::OnPeerGone(PeerKey peer, const Status& why, bool left) {
  FailCallsTo(peer.id, why);
  rrefs_->OnPeerGone(peer.id);
  SetMemberState(peer.id, peer.incarnation, left ? MemberState::kLeft : MemberState::kGone);
}

void Agent::OnDuplicateControl(PeerKey from, const InMessage& msg) {
  wire::Reader r(msg.body.data(), msg.body.size());
  wire::Control c;
  if (wire::Get(r, &c)) SendControlAck(from.id, c.control_id);
}

void Agent::SendControl(uint64_t to, const wire::Control& c) {
  auto m = std::make_unique<OutMessage>();
  m->kind = wire::Kind::kControl;
  wire::Writer w(&m->body);
  wire::Put(w, c);
  engine_->SendToMember(to, std::move(m));  // a failure is retried / moot
}

void Agent::SendControlAck(uint64_t to, uint64_t control_id) {
  std::lock_guard<std::mutex> l(mu_);
  acks_to_send_[to].push_back(control_id);
}

void Agent::FlushControlAcks() {
  std::map<uint64_t, std::vector<uint64_t>> acks;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (acks_to_send_.empty()) return;
    acks.swap(acks_to_send_);
  }
  for (auto& [to, ids] : acks) {
    auto m = std::make_unique<OutMessage>();
    m->kind = wire::Kind::kControlAck;
    wire::Writer w(&m->body);
    w.U32(static_cast<uint32_t>(ids.size()));
    for (uint64_t id : ids) w.U64(id);
    engine_->SendToMember(to, std::move(m));
  }
}

std::vector<MemberInfo> Agent::Members() {
  std::vector<MemberInfo> out;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [id, m] : members_) out.push_back(m);
  }
  for (auto& m : out) {
    if (m.id != self_.id) m.transport = engine_->RouteTo(m.id);
  }
  std::stable_sort(out.begin(), out.end(), [](const MemberInfo& a, const MemberInfo& b) {
    return (a.state == MemberState::kAlive) > (b.state == MemberState::kAlive);
  });
  return out;
}

Status Agent::WaitForWorkers(size_t n, std::chrono::milliseconds timeout) {
  auto alive = [this] {
    std::lock_guard<std::mutex> l(mu_);
    size_t k = 0;
    for (const auto& [id, m] : members_) k += m.state == MemberState::kAlive;
    return k;
  };
  if (engine_->WaitUntil([&] { return alive() >= n; },
                         std::chrono::steady_clock::now() + timeout)) {
    return Status::Ok();
  }
  return Status(FERRY_DEADLINE_EXCEEDED,
                "only " + std::to_string(alive()) + " of " + std::to_string(n) +
                    " workers joined job '" + options_.job + "' within " +
                    std::to_string(timeout.count()) + " ms");
}

void Agent::OnMembership(MemberCallback cb) {
  std::lock_guard<std::mutex> l(mu_);
  member_callbacks_.push_back(std::move(cb));
}

Agent::Stats Agent::stats() {
  Stats s;
  s.rref = rrefs_->stats();
  {
    std::lock_guard<std::mutex> l(mu_);
    s.pending_calls = calls_.size();
  }
  s.refused_connections = engine_->stats().refused;
  return s;
}

Status Agent::Shutdown(std::chrono::milliseconds grace) {
  if (stopped_.exchange(true)) return Status::Ok();
  if (!engine_) return Status::Ok();
  const auto deadline = std::chrono::steady_clock::now() + grace;
  // Finish the calls this worker is serving (bounded by `grace`).
  engine_->WaitUntil([this] { return serving_.load() == 0; }, deadline);
  // Release our references: drop every user fork we can (the deletes are
  // sent now), then tell the store we leave.
  if (rrefs_) {
    engine_->WaitUntil([this] { return rrefs_->stats().pending_controls == 0; },
                       std::min(deadline, std::chrono::steady_clock::now() +
                                              std::chrono::milliseconds(200)));
    rrefs_->Shutdown();
  }
  if (self_.id != 0) {
    if (store_) {
      store_->LeaveLocal(self_.id);
    } else if (store_conn_ != 0) {
      auto m = std::make_unique<OutMessage>();
      m->kind = wire::Kind::kStoreLeave;
      engine_->SendOnConn(store_conn_, std::move(m));
    }
  }
  // Fail what we were waiting for.
  std::map<uint64_t, PendingCall> calls;
  {
    std::lock_guard<std::mutex> l(mu_);
    calls.swap(calls_);
  }
  for (auto& [id, c] : calls) {
    c.future->Complete(Status(FERRY_CANCELLED, "worker '" + options_.name +
                                                   "' shut down before the reply came"));
  }
  engine_->Stop(std::max(std::chrono::milliseconds(100),
                         std::chrono::duration_cast<std::chrono::milliseconds>(
                             deadline - std::chrono::steady_clock::now())));
  executor_.reset();
  return Status::Ok();
}

}  // namespace ferry
