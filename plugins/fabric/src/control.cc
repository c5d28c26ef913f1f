// Connections over one RDM endpoint: the handshake (CONNECT / ACCEPT /
// REJECT), the teardown (DISCONNECT / DISCONNECT_ACK), and what happens to
// pending operations when a connection breaks or the host closes it.
//
// Peer death: a completion error on anything sent to (or read from) the
// peer breaks every connection it concerns with PEER_GONE and the
// provider's words. A reliable-datagram provider need not notice a dead
// peer that nothing is sent to (shm never does; tcp;ofi_rxm only when a send
// hits the reset connection), so the plugin does not claim
// FERRY_CAP_DETECTS_PEER_DEATH: the core's heartbeats cover the rest.
#include "context.h"

#include "fi_error.h"

#include "ferry_plugin/log.h"

#include <algorithm>
#include <cstring>

namespace ferry_fabric {

// --- handshake ----------------------------------------------------------------

void Context::OnConnect(const char* frame, size_t len) {
  wire::Connect f;
  if (!wire::Read(frame, len, &f) || f.name_len == 0 || f.name_len > wire::kMaxNameLen ||
      len - sizeof f < f.name_len) {
    FERRY_PLUGIN_LOG(FERRY_LOG_WARN, "dropping a malformed CONNECT (%zu bytes)", len);
    return;
  }
  sweep_pending_ = true;  // the provider accepted a connection for it
  Peer* peer = nullptr;
  Status st = peers_->Get(std::string(frame + sizeof f, f.name_len), &peer);
  if (!st.ok()) {
    FERRY_PLUGIN_LOG(FERRY_LOG_WARN, "refusing a connection: %s", st.message.c_str());
    return;
  }
  auto it = listeners_.find(f.listener_id);
  if (it == listeners_.end()) {
    SendReject(peer, f.src_conn, FERRY_UNAVAILABLE,
               Format("connection refused: no listener %llu at this endpoint "
                      "(closed, or the address is stale)",
                      static_cast<unsigned long long>(f.listener_id)));
    return;
  }
  if (f.limits.eager_size < wire::kMinEagerSize || f.limits.max_segments == 0) {
    SendReject(peer, f.src_conn, FERRY_INCOMPATIBLE,
               "connection refused: the connecting side announced unusable "
               "limits (eager_size below 4096 or no segments)");
    return;
  }
  auto* c = new Conn(this, peer, /*is_accepted=*/true);
  c->id = conns_.Insert(c);
  all_conns_.push_back(c);
  c->state = Conn::State::kOpen;
  c->remote_id = f.src_conn;
  SetPeerLimits(c, f.limits);
  c->peer_address = peer->printable;
  Emit(FERRY_EV_ACCEPTED, c, it->second->user_data);
  wire::Accept a{};
  a.head = wire::MakeHead(wire::kAccept, f.src_conn);
  a.src_conn = c->id;
  a.limits = OwnLimits();
  SendControl(peer, c->id, &a, sizeof a);
}

void Context::OnAccept(const char* frame, size_t len) {
  wire::Accept f;
  if (!wire::Read(frame, len, &f)) return;
  Conn* c = conns_.Find(f.head.dst);
  if (c == nullptr) {
    // Closed while connecting: tell the acceptor, whose side is open.
    auto t = tombstones_.find(f.head.dst);
    if (t != tombstones_.end()) {
      wire::Head d = wire::MakeHead(wire::kDisconnect, f.src_conn, 0);
      SendControl(t->second, 0, &d, sizeof d);
      tombstones_.erase(t);
    }
    return;
  }
  if (c->state != Conn::State::kConnecting || c->accepted) {
    // Given up on (connect timeout) before the answer came: the acceptor's
    // side is open, tell it to let go.
    if (!c->accepted && c->remote_id == 0) {
      wire::Head d = wire::MakeHead(wire::kDisconnect, f.src_conn, 0);
      SendControl(c->peer, 0, &d, sizeof d);
    }
    return;
  }
  sweep_pending_ = true;
  c->remote_id = f.src_conn;
  SetPeerLimits(c, f.limits);
  c->state = Conn::State::kOpen;
  DisarmDeadline(c);
  Emit(FERRY_EV_CONNECTED, c, c->connect_cookie);
  TryDeliver(c);
  PumpTx(c);
}

void Context::OnReject(const char* frame, size_t len) {
  wire::Reject f;
  if (!wire::Read(frame, len, &f)) return;
  tombstones_.erase(f.head.dst);
  Conn* c = conns_.Find(f.head.dst);
  if (c == nullptr || c->state != Conn::State::kConnecting || c->close_called) {
    return;
  }
  std::string text(frame + sizeof f, std::min<size_t>(f.text_len, len - sizeof f));
  ferry_status_t status =
      f.status == FERRY_OK ? FERRY_UNAVAILABLE : static_cast<ferry_status_t>(f.status);
  FailConnect(c, status,
              "fabric: " + c->peer_address + " refused the connection: " + text);
}

void Context::SendReject(Peer* peer, uint64_t conn_id, ferry_status_t status,
                         const std::string& text) {
  wire::Reject f{};
  f.head = wire::MakeHead(wire::kReject, conn_id);
  f.status = status;
  f.text_len = static_cast<uint32_t>(std::min<size_t>(text.size(), 512));
  SendControl(peer, 0, &f, sizeof f, text.data(), f.text_len);
}

// --- teardown ---------------------------------------------------------------------

void Context::SendDisconnect(Conn* c) {
  if (c->remote_id == 0 || c->peer_closed || c->peer->Unreachable()) return;
  wire::Head d = wire::MakeHead(wire::kDisconnect, c->remote_id, c->next_seq);
  SendControl(c->peer, c->id, &d, sizeof d);
}

void Context::SendDisconnectAck(Conn* c) {
  if (c->remote_id == 0 || c->peer->Unreachable()) return;
  wire::Head d = wire::MakeHead(wire::kDisconnectAck, c->remote_id);
  SendControl(c->peer, c->id, &d, sizeof d);
}

void Context::OnDisconnect(const char* frame, size_t len) {
  wire::Head h;
  if (!wire::Read(frame, len, &h)) return;
  Conn* c = conns_.Find(h.dst);
  if (c == nullptr) return;
  if (c->close_called) {
    // Both sides closed at once: the peer has stopped reading our memory.
    PeerLost(c);
    return;
  }
  if (c->peer_closed || c->state == Conn::State::kBroken) return;
  c->peer_closed = true;
  c->peer_final_seq = h.aux;
  const std::string why = "fabric: the peer closed the connection";
  // It takes no more messages, and it will not read ours.
  FailQueuedSends(c, FERRY_PEER_GONE, why);
  FailWaitingSends(c, FERRY_PEER_GONE, why, /*keep_exposed=*/false);
  // Streams stop with it; reads already under way finish (its memory stays
  // readable until our DISCONNECT_ACK), then we acknowledge.
  std::vector<Placement*> ps = c->placements;
  for (Placement* p : ps) {
    if (p->stream) {
      p->Fail(FERRY_PEER_GONE, why + " before the message's data arrived");
      MaybeFinishPlacement(p);
    }
  }
  if (c->placements.empty()) {
    SendDisconnectAck(c);
  } else {
    c->ack_owed = true;
  }
  // Messages it sent before closing are still delivered; CONN_BROKEN
  // follows the last (MaybeFinishPeerClose). While connecting, OnAccept
  // gets there.
  if (c->state == Conn::State::kOpen) TryDeliver(c);
}

void Context::OnDisconnectAck(const char* frame, size_t len) {
  wire::Head h;
  if (!wire::Read(frame, len, &h)) return;
  Conn* c = conns_.Find(h.dst);
  if (c != nullptr && c->close_called) PeerLost(c);
}

void Context::PeerLost(Conn* c) {
  c->awaiting_ack = false;
  c->disconnect_owed = false;
  CheckClose(c);
}

void Context::FailConnect(Conn* c, ferry_status_t status, const std::string& message) {
  if (c->state != Conn::State::kConnecting) return;
  c->state = Conn::State::kBroken;
  c->broken_status = status;
  c->broken_message = message;
  DisarmDeadline(c);
  DropReceived(c);
  FailQueuedSends(c, status, message);
  EmitError(FERRY_EV_CONNECTED, c, c->connect_cookie, status, message);
}

void Context::Break(Conn* c, ferry_status_t status, const std::string& message) {
  if (c->close_called) {
    PeerLost(c);
    return;
  }
  if (c->state == Conn::State::kConnecting) {
    FailConnect(c, status, message);
    return;
  }
  if (c->state != Conn::State::kOpen) return;  // reported once
  c->state = Conn::State::kBroken;
  c->broken_status = status;
  c->broken_message = message;
  FailQueuedSends(c, status, message);
  FailWaitingSends(c, status, message, /*keep_exposed=*/false);
  if (!c->peer_closed) {
    // Failed, not closed: what has not been delivered is not coming whole.
    for (RxMsg* m : c->ready) ReleaseRxMsg(m);
    c->ready.clear();
    for (auto& [seq, m] : c->early) ReleaseRxMsg(m);
    c->early.clear();
    std::vector<Placement*> ps = c->placements;
    for (Placement* p : ps) {
      p->Fail(status, message);  // unposted reads are dropped
      MaybeFinishPlacement(p);
    }
  }
  EmitError(FERRY_EV_CONN_BROKEN, c, nullptr, status, message);
}

void Context::Close(Conn* c) {
  if (c->close_called) return;
  c->close_called = true;
  DropReceived(c);  // unanswered arrivals can no longer be answered
  const std::string why = "fabric: cancelled: the connection was closed";
  if (c->state == Conn::State::kConnecting) {
    FailQueuedSends(c, FERRY_CANCELLED, why + " before it was established");
    EmitError(FERRY_EV_CONNECTED, c, c->connect_cookie, FERRY_CANCELLED,
              why + " before it was established");
    c->state = Conn::State::kBroken;
    tombstones_[c->id] = c->peer;  // a late ACCEPT gets a DISCONNECT
  } else {
    const bool open =
        c->state == Conn::State::kOpen && !c->peer_closed && !c->peer->Unreachable();
    FailQueuedSends(c, FERRY_CANCELLED, why);
    // Segments the peer may be reading stay exposed until it says it has
    // stopped (DISCONNECT_ACK), so the host does not reuse memory under a
    // remote read; everything else completes now.
    FailWaitingSends(c, FERRY_CANCELLED, why, /*keep_exposed=*/open);
    c->awaiting_ack = open && !c->waiting.empty();
    c->disconnect_owed = open;
    if (c->awaiting_ack) ArmDeadline(c, config_.close_timeout_ms);
    std::vector<Placement*> ps = c->placements;
    for (Placement* p : ps) {
      p->cancelled = true;  // reads in flight land first
      MaybeFinishPlacement(p);
    }
    PumpReads();  // drops this connection's reads not yet posted
  }
  CheckClose(c);
}

void Context::CheckClose(Conn* c) {
  if (!c->close_called || c->state == Conn::State::kClosed) return;
  if (c->disconnect_owed && c->ReadsInFlight() == 0) {
    // Our reads of the peer's memory are done: now it may let go.
    c->disconnect_owed = false;
    SendDisconnect(c);
  }
  if (!c->placements.empty() || c->disconnect_owed) return;
  if (c->awaiting_ack && !c->waiting.empty()) return;
  c->awaiting_ack = false;
  FailWaitingSends(c, FERRY_CANCELLED, "fabric: cancelled: the connection was closed",
                   false);
  DisarmDeadline(c);
  c->state = Conn::State::kClosed;
  conns_.Remove(c->id);
  Emit(FERRY_EV_CLOSED, c, nullptr);
}

// --- deadlines ------------------------------------------------------------------

void Context::ArmDeadline(Conn* c, uint32_t ms) {
  if (!c->has_deadline) {
    c->has_deadline = true;
    ++deadlines_;
  }
  c->deadline = Conn::Clock::now() + std::chrono::milliseconds(ms);
  UpdateTicking();
}

void Context::DisarmDeadline(Conn* c) {
  if (!c->has_deadline) return;
  c->has_deadline = false;
  --deadlines_;
  UpdateTicking();
}

void Context::UpdateTicking() {
  if (has_wakeup_) wakeup_.SetTicking(deadlines_ > 0);
}

void Context::CheckDeadlines() {
  const auto now = Conn::Clock::now();
  for (size_t i = 0; i < all_conns_.size(); ++i) {
    Conn* c = all_conns_[i];
    if (!c->has_deadline || now < c->deadline) continue;
    DisarmDeadline(c);
    if (c->state == Conn::State::kConnecting && !c->close_called) {
      FailConnect(
          c, FERRY_DEADLINE_EXCEEDED,
          Format("fabric: connecting to %s timed out after %u ms "
                 "without an answer (is the peer process alive, and "
                 "does it use libfabric provider %s?)",
                 c->peer_address.c_str(), config_.connect_timeout_ms, provider_.c_str()));
    } else if (c->close_called && c->awaiting_ack) {
      FERRY_PLUGIN_LOG(FERRY_LOG_WARN,
                       "closing a connection to %s: no DISCONNECT_ACK within %u ms; "
                       "releasing its exposed segments anyway",
                       c->peer_address.c_str(), config_.close_timeout_ms);
      PeerLost(c);
    }
  }
}

}  // namespace ferry_fabric
