// The peer table (engine.h): which members this worker may talk to, which
// connection reaches each, sending to a member, and a member's end (its
// connection failed, it left, it restarted).
#include "common/log.h"
#include "engine/connection.h"
#include "engine/engine.h"
#include "engine/peer.h"
#include "engine/route.h"

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
        if (p->record.endpoints.empty()) {
          p->record = record;
          // Messages may wait for a primary nobody could dial until now.
          if (!p->gone && !p->leaving && !p->backlog.empty()) {
            (void)SendOnPrimaryLocked(p, 0, nullptr);
          }
        }
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
    AttachHandshakingConns(p.get());
    peers_[record.id] = std::move(p);
  }
  for (auto& a : actions) a();
}

void Engine::AttachHandshakingConns(Peer* p) {
  for (auto& [cid, c] : conns_) {
    if (!c->outbound && !c->store && c->state == Conn::State::kChallengeSent &&
        c->peer_id == p->record.id && c->peer_incarnation == p->record.incarnation) {
      (c->device ? p->dev_inbound : p->inbound) = c.get();
    }
  }
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

std::string Engine::DeviceRouteTo(uint64_t id) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = peers_.find(id);
  return it == peers_.end() ? "" : it->second->device_route;
}

std::vector<route::Local> Engine::LocalRoutes() const {
  std::vector<route::Local> mine;
  for (const auto& s : slots_) {
    if (!s->member) continue;
    const auto& info = s->transport->info();
    mine.push_back(
        route::Local{s->name, info.memory_kinds, info.priority, s->transport->domain()});
  }
  return mine;
}

StatusOr<wire::Endpoint> Engine::ChooseEndpoint(const wire::MemberRecord& r) const {
  return route::Choose(LocalRoutes(), r.endpoints, FERRY_MEM_HOST, r.name);
}

bool Engine::CanCarry(uint64_t kind) const {
  if (!route::NeedsDevice(kind)) return true;
  if (kind == FERRY_MEM_CUDA && device_memory_ && device_memory_->can_copy()) return true;
  for (const auto& s : slots_) {
    if (s->member && (s->transport->info().memory_kinds & kind) == kind) return true;
  }
  return false;
}

uint64_t Engine::NeededKinds(const OutMessage& msg) {
  uint64_t needed = FERRY_MEM_HOST;
  for (const auto& t : msg.tensors) needed |= route::MemoryKindOf(t.device);
  return needed;
}

Status Engine::SendToMember(uint64_t id, std::unique_ptr<OutMessage> msg) {
  if (Status s = CheckMessageSize(*msg); !s.ok()) return s;
  const uint64_t needed = NeededKinds(*msg);
  if (route::NeedsDevice(needed)) return SendDeviceMessage(id, std::move(msg), needed);
  std::lock_guard<std::mutex> l(mu_);
  auto it = peers_.find(id);
  if (it == peers_.end()) {
    return Status(FERRY_NOT_FOUND, "worker id " + std::to_string(id) +
                                       " is not a member of job '" + options_.job + "'");
  }
  Peer* p = it->second.get();
  if (p->gone) return p->gone_why;
  if (p->leaving) return p->LeftTheJob();
  ChargeQueuedBytes(p, msg.get());
  return SendOnPrimaryLocked(p, p->next_seq++, std::move(msg));
}

// `msg` NULL: only makes sure the primary is there or on its way.
Status Engine::SendOnPrimaryLocked(Peer* p, uint64_t seq,
                                   std::unique_ptr<OutMessage> msg) {
  if (p->conn != nullptr && p->conn->state == Conn::State::kReady) {
    if (!msg) return Status::Ok();
    Status s = SendOnConnLocked(p->conn, std::move(msg), seq);
    if (s.ok() || s.code() != FERRY_PEER_GONE) return s;
    // The transport noticed the break before the engine did: its message
    // names a socket, not the worker.
    return Status(FERRY_PEER_GONE,
                  "worker '" + p->record.name + "' is gone: " + s.message());
  }
  if (msg) p->backlog.emplace_back(seq, std::move(msg));
  // A connection of the peer's that we accepted will carry this: opening a
  // second one would make two that each side may take for the one. A peer
  // known only from its own connection (no endpoints yet: the store's news
  // of it is still on its way) opens its primary itself.
  if (p->conn == nullptr && p->outbound == nullptr && p->inbound == nullptr &&
      !p->waiting_for_theirs && !p->record.endpoints.empty()) {
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

void Engine::PinStreamsToCaller(OutMessage* msg) {
  for (auto& t : msg->tensors) {
    if (t.stream == FERRY_STREAM_PER_THREAD) t.stream = FERRY_STREAM_LEGACY;
  }
}

// A message with tensors in device memory: over the device route when one
// reaches the peer (the primary when that is the same transport, else the
// peer's device connection), otherwise staged through host memory and sent
// over the primary (the receiver puts it back into device memory).
Status Engine::SendDeviceMessage(uint64_t id, std::unique_ptr<OutMessage> msg,
                                 uint64_t needed) {
  {
    std::unique_lock<std::mutex> l(mu_);
    auto it = peers_.find(id);
    if (it == peers_.end()) {
      return Status(FERRY_NOT_FOUND, "worker id " + std::to_string(id) +
                                         " is not a member of job '" + options_.job +
                                         "'");
    }
    Peer* p = it->second.get();
    if (p->gone) return p->gone_why;
    if (p->leaving) return p->LeftTheJob();
    if (p->dev_conn != nullptr && p->dev_conn->state == Conn::State::kReady &&
        (p->dev_conn->slot->transport->info().memory_kinds & needed) == needed) {
      // The device connection is up (the peer may have opened it before the
      // store's news of it gave us its endpoints): it carries the message.
      ++stats_.device_messages;
      PinStreamsToCaller(msg.get());
      Status s = SendOnConnLocked(p->dev_conn, std::move(msg), p->next_seq++);
      if (!s.ok()) return s;
      // Heartbeats (and host messages) need the primary: keep it there.
      return SendOnPrimaryLocked(p, 0, nullptr);
    }
    // A queued message is sent later, by whichever thread pumps: a stream
    // that names the calling thread's must be pinned down now.
    PinStreamsToCaller(msg.get());
    auto ep = route::Choose(LocalRoutes(), p->record.endpoints, needed, p->record.name);
    if (ep.ok()) {
      const uint64_t seq = p->next_seq++;
      ++stats_.device_messages;
      p->device_route = ep->plugin;
      const bool on_primary = p->conn != nullptr && p->conn->state == Conn::State::kReady
                                  ? p->conn->slot->name == ep->plugin
                                  : [&] {
                                      auto host = ChooseEndpoint(p->record);
                                      return !host.ok() || host->plugin == ep->plugin;
                                    }();
      if (on_primary) return SendOnPrimaryLocked(p, seq, std::move(msg));
      if (p->dev_conn != nullptr && p->dev_conn->state == Conn::State::kReady) {
        Status s = SendOnConnLocked(p->dev_conn, std::move(msg), seq);
        if (!s.ok()) return s;
        return SendOnPrimaryLocked(p, 0, nullptr);
      }
      p->dev_backlog.emplace_back(seq, std::move(msg));
      if (p->dev_outbound == nullptr && p->dev_inbound == nullptr &&
          !p->dev_waiting_for_theirs) {
        Status s = ConnectToPeer(p, &ep.value());
        if (!s.ok()) {
          std::vector<Action> actions;
          PeerGone(p, s, &actions);
          for (auto& a : actions) {
            timers_.Add(std::chrono::milliseconds(0), Clock::now(), std::move(a));
          }
          return s;
        }
      }
      // Heartbeats (and host messages) need the primary: open it too.
      return SendOnPrimaryLocked(p, 0, nullptr);
    }
    if ((needed & ~(FERRY_MEM_HOST | FERRY_MEM_CUDA)) != 0 || !device_memory_ ||
        !device_memory_->can_copy()) {
      return Status(FERRY_FAILED_PRECONDITION,
                    "cannot send device tensors to worker '" + p->record.name +
                        "': " + ep.status().message() +
                        ", and no transport loaded in this worker can copy device "
                        "memory to stage them through host memory: load the "
                        "cuda_ipc transport (transport \"auto\", or e.g. "
                        "\"tcp,cuda_ipc\")");
    }
    p->device_route = "staged";
    if (!p->staging_logged) {
      p->staging_logged = true;
      FERRY_LOG(FERRY_LOG_INFO, kLog,
                "device tensors to worker '" + p->record.name +
                    "' are staged through host memory: " + ep.status().message());
    }
  }
  // The copies run without the lock: they may take a while (64 MiB).
  uint64_t bytes = 0;
  Status s = StageThroughHost(msg.get(), &bytes);
  if (!s.ok()) return s;
  {
    std::lock_guard<std::mutex> l(mu_);
    ++stats_.staged_messages;
    stats_.staged_bytes += bytes;
  }
  return SendToMember(id, std::move(msg));
}

Status Engine::StageThroughHost(OutMessage* msg, uint64_t* bytes) {
  for (auto& t : msg->tensors) {
    if (!route::NeedsDevice(route::MemoryKindOf(t.device))) continue;
    AlignedBuffer host(t.nbytes);
    Status s = device_memory_->Copy(host.data, DLDevice{kDLCPU, 0}, t.data, t.device,
                                    t.nbytes, t.stream);
    if (!s.ok()) {
      return Status(s.code(), "staging a tensor of " + std::to_string(t.nbytes) +
                                  " bytes from " + DeviceMemory::DeviceName(t.device) +
                                  " through host memory failed: " + s.message());
    }
    *bytes += t.nbytes;
    t.data = host.data;
    t.device = DLDevice{kDLCPU, 0};
    t.stream = 0;
    // The bytes are captured: the device memory can go back now.
    if (t.managed != nullptr && t.managed->deleter != nullptr) {
      t.managed->deleter(t.managed);
    }
    t.managed = nullptr;
    msg->staged.push_back(std::move(host));
  }
  return Status::Ok();
}

Status Engine::ConnectToPeer(Peer* p, const wire::Endpoint* device_ep) {
  auto ep = device_ep != nullptr ? StatusOr<wire::Endpoint>(*device_ep)
                                 : ChooseEndpoint(p->record);
  if (!ep.ok()) return ep.status();
  TransportSlot* slot = SlotNamed(ep->plugin);
  auto c = std::make_unique<Conn>();
  c->id = next_conn_id_++;
  c->slot = slot;
  c->outbound = true;
  if (device_ep != nullptr) {
    c->device = true;
    c->role = wire::Role::kMemberDevice;
  }
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
  (device_ep != nullptr ? p->dev_outbound : p->outbound) = c.get();
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
    if (known) {
      order_.Queue(
          DeliveryOrder::Source::kStore, id,
          [this, id, why] { sink_->OnStoreConnGone(id, why); }, true, actions);
    }
    return;
  }
  if (c->device) {
    DeviceConnFailed(c, why, actions);
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

// The same for a device connection: the peer is gone if it was its device
// connection or our attempt to open one (unless it is leaving), and ours
// takes over when its attempt failed with device messages waiting.
void Engine::DeviceConnFailed(Conn* c, const Status& why, std::vector<Action>* actions) {
  auto it = peers_.find(c->peer_id);
  Peer* p = it == peers_.end() ? nullptr : it->second.get();
  const bool was_conn = p != nullptr && p->dev_conn == c;
  const bool was_outbound = p != nullptr && p->dev_outbound == c;
  const bool was_inbound = p != nullptr && p->dev_inbound == c;
  const std::string plugin = c->slot->name;
  CloseConnLocked(c);  // detaches c from p
  if (p == nullptr || p->gone) return;
  if (p->leaving) {
    // Its last replies come over what remains; nothing new goes to it.
    if (p->dev_conn == nullptr && p->dev_outbound == nullptr) p->dev_backlog.clear();
    return;
  }
  if (was_inbound && p->dev_conn == nullptr && p->dev_outbound == nullptr &&
      !p->dev_backlog.empty()) {
    auto ep =
        route::Choose(LocalRoutes(), p->record.endpoints, FERRY_MEM_CUDA, p->record.name);
    Status s = ep.ok() ? ConnectToPeer(p, &ep.value()) : ep.status();
    if (!s.ok()) PeerGone(p, s, actions);
    return;
  }
  if (was_outbound && p->dev_conn == nullptr && !p->dev_waiting_for_theirs) {
    PeerGone(p,
             Status(why.code() == FERRY_UNAVAILABLE ? FERRY_PEER_GONE : why.code(),
                    "cannot reach worker '" + p->record.name + "' over " + plugin +
                        " (its device transport): " + why.message()),
             actions);
    return;
  }
  if (was_conn) {
    PeerGone(p,
             Status(why.code() == FERRY_OK ? FERRY_PEER_GONE : why.code(),
                    "worker '" + p->record.name + "' is gone: its " + plugin +
                        " connection failed: " + why.message()),
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
  p->dev_backlog.clear();
  if (p->conn) CloseConnLocked(p->conn);
  if (p->outbound) CloseConnLocked(p->outbound);
  if (p->inbound) CloseConnLocked(p->inbound);
  if (p->dev_conn) CloseConnLocked(p->dev_conn);
  if (p->dev_outbound) CloseConnLocked(p->dev_outbound);
  if (p->dev_inbound) CloseConnLocked(p->dev_inbound);
  FERRY_LOG(FERRY_LOG_INFO, kLog, p->gone_why.message());
  const PeerKey key{p->record.id, p->record.incarnation};
  if (p->leaving) p->gone_why = p->LeftTheJob();
  const Status s = p->gone_why;
  const bool left = p->leaving;
  order_.Queue(
      DeliveryOrder::Source::kMember, key.id,
      [this, key, s, left] { sink_->OnPeerGone(key, s, left); }, true, actions);
}

}  // namespace ferry
