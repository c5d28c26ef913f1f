// The peer table (engine.h): which members this worker may talk to, which
// connection reaches each, sending to a member, and a member's end (its
// connection failed, it left, it restarted).
#include "common/log.h"
#include "engine/connection.h"
#include "engine/engine.h"
#include "engine/peer.h"

namespace ferry {
namespace {

constexpr const char* kLog = "engine";

}  // namespace

void Engine::SetSelf(uint64_t id, uint64_t incarnation, const std::string& name) {
  std::vector<Action> actions;
  {
    std::lock_guard<std::mutex> l(mu_);
    self_id_ = id;
    self_incarnation_ = incarnation;
    self_name_ = name;
    auto early = std::move(early_hellos_);
    early_hellos_.clear();
    for (auto& [conn, msg] : early) {
      if (Conn* c = FindConn(conn)) OnHandshake(c, *msg, &actions);
    }
  }
  for (auto& a : actions) a();
}

void Engine::AddMember(const wire::MemberRecord& record) {
  std::vector<Action> actions;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (record.id == self_id_) return;
    auto it = peers_.find(record.id);
    if (it != peers_.end()) {
      Peer* p = it->second.get();
      if (p->record.incarnation > record.incarnation) return;  // stale news
      if (p->record.incarnation == record.incarnation) {
        if (p->record.endpoints.empty()) p->record = record;
        return;
      }
      // A newer incarnation: the old process is gone.
      if (!p->gone) {
        PeerGone(p,
                 Status(FERRY_PEER_GONE, "worker '" + p->record.name +
                                             "' restarted (incarnation " +
                                             std::to_string(record.incarnation) + ")"),
                 &actions);
      }
      peers_.erase(it);
    }
    auto p = std::make_unique<Peer>();
    p->record = record;
    // Its connection may have arrived before the store's news of it.
    for (auto& [cid, c] : conns_) {
      if (!c->outbound && !c->store && c->state == Conn::State::kChallengeSent &&
          c->peer_id == record.id && c->peer_incarnation == record.incarnation) {
        p->inbound = c.get();
      }
    }
    peers_[record.id] = std::move(p);
  }
  for (auto& a : actions) a();
}

void Engine::RemoveMember(uint64_t id, const Status& why, bool left) {
  std::vector<Action> actions;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = peers_.find(id);
    if (it == peers_.end() || it->second->gone) return;
    Peer* p = it->second.get();
    if (left) p->leaving = true;
    if (left && p->conn != nullptr && p->conn->state == Conn::State::kReady) {
      // The store's news travels on another connection than the worker's
      // last replies, and can overtake them: a reply it sent before leaving
      // would be lost, its call failed with "left the job". So the
      // connection is read to its end; its close (or, if it never closes,
      // the heartbeat timeout) ends the peer.
      return;
    }
    PeerGone(p, why, &actions);
  }
  for (auto& a : actions) a();
}

std::string Engine::RouteTo(uint64_t id) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = peers_.find(id);
  if (it == peers_.end() || it->second->conn == nullptr) return "";
  return it->second->conn->slot->name;
}

StatusOr<wire::Endpoint> Engine::ChooseEndpoint(const wire::MemberRecord& r) const {
  // Our transports in preference order: the first configured one the peer
  // also has, in the same domain, wins; with several configured ("auto"),
  // the highest priority among the shared ones.
  const wire::Endpoint* best = nullptr;
  const TransportSlot* best_slot = nullptr;
  for (const auto& s : slots_) {
    if (!s->member) continue;
    for (const auto& e : r.endpoints) {
      if (e.plugin != s->name || e.domain != s->transport->domain()) continue;
      if (best == nullptr ||
          s->transport->info().priority > best_slot->transport->info().priority) {
        best = &e;
        best_slot = s.get();
      }
    }
  }
  if (best == nullptr) {
    std::string mine, theirs;
    for (const auto& s : slots_) {
      if (s->member) mine += (mine.empty() ? "" : ",") + s->name;
    }
    for (const auto& e : r.endpoints) theirs += (theirs.empty() ? "" : ",") + e.plugin;
    return Status(FERRY_UNAVAILABLE,
                  "no transport reaches worker '" + r.name + "': this worker has [" +
                      mine + "], it has [" + theirs +
                      "] (or the same plugin in another domain, e.g. shm on "
                      "another host); start both with a shared transport");
  }
  return *best;
}

Status Engine::SendToMember(uint64_t id, std::unique_ptr<OutMessage> msg) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = peers_.find(id);
  if (it == peers_.end()) {
    return Status(FERRY_NOT_FOUND, "worker id " + std::to_string(id) +
                                       " is not a member of job '" + options_.job + "'");
  }
  Peer* p = it->second.get();
  if (p->gone) return p->gone_why;
  if (p->leaving) return p->LeftTheJob();
  const uint64_t seq = p->next_seq++;
  if (p->conn != nullptr && p->conn->state == Conn::State::kReady) {
    return SendOnConnLocked(p->conn, std::move(msg), seq);
  }
  p->backlog.emplace_back(seq, std::move(msg));
  // A connection of the peer's that we accepted will carry this: opening a
  // second one would make two that each side may take for the one.
  if (p->outbound == nullptr && p->inbound == nullptr && !p->waiting_for_theirs) {
    Status s = ConnectToPeer(p);
    if (!s.ok()) {
      std::vector<Action> actions;
      PeerGone(p, s, &actions);
      // Sink callbacks must not run under mu_: hand them to a pumper.
      // (PeerGone's actions only report; running them late is harmless.)
      for (auto& a : actions) {
        timers_.Add(std::chrono::milliseconds(0), Clock::now(), std::move(a));
      }
      return s;
    }
  }
  return Status::Ok();
}

Status Engine::ConnectToPeer(Peer* p) {
  auto ep = ChooseEndpoint(p->record);
  if (!ep.ok()) return ep.status();
  TransportSlot* slot = SlotNamed(ep->plugin);
  auto c = std::make_unique<Conn>();
  c->id = next_conn_id_++;
  c->slot = slot;
  c->outbound = true;
  c->peer_id = p->record.id;
  c->peer_incarnation = p->record.incarnation;
  c->peer_name = p->record.name;
  c->address = ep->address;
  c->started = Clock::now();
  auto calls = slot->LockCalls();
  Status s = slot->transport->Connect(ep->address, nullptr, &c->handle);
  if (!s.ok()) {
    return Status(s.code(), "cannot connect to worker '" + p->record.name + "' at " +
                                ep->plugin + " " + ep->address + ": " + s.message());
  }
  slot->by_handle[c->handle] = c.get();
  p->outbound = c.get();
  conns_[c->id] = std::move(c);
  return Status::Ok();
}

// A connection failed (broken, refused, silent). What it means depends on
// what it was to its peer: the peer's one connection (the peer is gone),
// our connect attempt (unreachable, unless its own connection is coming),
// or its connection mid-handshake (ours takes over the waiting calls).
void Engine::ConnFailed(Conn* c, const Status& why, std::vector<Action>* actions) {
  if (c->store) {
    // Only a connection that was ours or had authenticated concerns the
    // store's users: a stranger refused during its handshake is not news
    // (and must not read as the loss of the store this worker is joining).
    const bool known = c->outbound || c->state == Conn::State::kReady;
    const uint64_t id = c->id;
    CloseConnLocked(c);
    if (known) actions->push_back([this, id, why] { sink_->OnStoreConnGone(id, why); });
    return;
  }
  auto it = peers_.find(c->peer_id);
  Peer* p = it == peers_.end() ? nullptr : it->second.get();
  const bool was_conn = p != nullptr && p->conn == c;
  const bool was_outbound = p != nullptr && p->outbound == c;
  const bool was_inbound = p != nullptr && p->inbound == c;
  CloseConnLocked(c);  // detaches c from p
  if (was_inbound && !p->gone && p->conn == nullptr && p->outbound == nullptr &&
      !p->backlog.empty()) {
    // Calls were waiting for the connection it had opened: open ours.
    Status s = ConnectToPeer(p);
    if (!s.ok()) PeerGone(p, s, actions);
    return;
  }
  if (was_outbound && p->conn == nullptr && !p->waiting_for_theirs) {
    PeerGone(p,
             Status(why.code() == FERRY_UNAVAILABLE ? FERRY_PEER_GONE : why.code(),
                    "cannot reach worker '" + p->record.name + "': " + why.message()),
             actions);
    return;
  }
  if (was_conn) {
    PeerGone(p,
             Status(why.code() == FERRY_OK ? FERRY_PEER_GONE : why.code(),
                    "worker '" + p->record.name + "' is gone: " + why.message()),
             actions);
  }
}

void Engine::PeerGone(Peer* p, const Status& why, std::vector<Action>* actions) {
  if (p->gone) return;
  p->gone = true;
  p->gone_why = why.code() == FERRY_DEADLINE_EXCEEDED
                    ? Status(FERRY_PEER_GONE, why.message())
                    : why;
  p->backlog.clear();
  if (p->conn) CloseConnLocked(p->conn);
  if (p->outbound) CloseConnLocked(p->outbound);
  if (p->inbound) CloseConnLocked(p->inbound);
  FERRY_LOG(FERRY_LOG_INFO, kLog, p->gone_why.message());
  const PeerKey key{p->record.id, p->record.incarnation};
  if (p->leaving) p->gone_why = p->LeftTheJob();
  const Status s = p->gone_why;
  const bool left = p->leaving;
  actions->push_back([this, key, s, left] { sink_->OnPeerGone(key, s, left); });
}

}  // namespace ferry
