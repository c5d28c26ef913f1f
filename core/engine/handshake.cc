// The connection handshake (engine.h): every connection, a member's or the
// store's, authenticates before it carries anything.
//
//   connector                          acceptor
//   HELLO (job, id, name, nonce)  ->
//                                 <-   CHALLENGE (id, nonce, acceptor's proof)
//   AUTH (connector's proof)      ->
//                                 <-   READY
//
// Each proof is an HMAC of both nonces under the job secret (auth.h), so
// each side proves it holds the secret without sending it. Before READY
// nothing but header-only handshake messages is accepted (arrival.cc).
// Either side may answer REJECT (code, why) and close. docs/protocol.md
// describes the exchange for users; this file is its implementation.
#include "common/log.h"
#include "engine/auth.h"
#include "engine/connection.h"
#include "engine/engine.h"
#include "engine/handshake_step.h"
#include "engine/peer.h"
#include "engine/route.h"

namespace ferry {
namespace {

constexpr const char* kLog = "engine";

}  // namespace

void Engine::OnConnected(Conn* c, const ferry_event_t& ev, std::vector<Action>* actions) {
  if (c->state == Conn::State::kClosed) return;
  if (ev.status != FERRY_OK) {
    ConnFailed(c, Status(ev.status, ev.message ? ev.message : "connect failed"), actions);
    return;
  }
  ++stats_.connections;
  c->state = Conn::State::kHelloSent;
  c->last_heard = Clock::now();
  c->my_nonce = auth::RandomNonce();
  wire::Hello hello;
  hello.role = c->role;
  hello.job = options_.job;
  hello.id = c->store ? 0 : self_id_.load();
  hello.incarnation = self_incarnation_;
  hello.name = self_name_;
  hello.nonce = c->my_nonce;
  SendHandshake(c, wire::Kind::kHello,
                [&](wire::Writer& w) { wire::EncodeHello(hello, w); });
}

void Engine::OnHandshake(Conn* c, const InMessage& msg, std::vector<Action>* actions) {
  wire::Reader r(msg.body.data(), msg.body.size());
  switch (NextHandshakeStep(msg.envelope.kind, c->state)) {
    case HandshakeStep::kReject: {
      wire::Reject reject;
      wire::DecodeReject(r, &reject);  // a short REJECT still refuses
      OnReject(c, reject, actions);
      return;
    }
    case HandshakeStep::kHello:
      OnHello(c, r, actions);
      return;
    case HandshakeStep::kChallenge:
      OnChallenge(c, r, actions);
      return;
    case HandshakeStep::kAuth:
      OnAuth(c, r, actions);
      return;
    case HandshakeStep::kReady:
      MakeReady(c, actions);
      return;
    case HandshakeStep::kDuplicate:
      return;
    case HandshakeStep::kOutOfOrder:
      break;
  }
  ++stats_.refused;
  RejectAndClose(c, FERRY_FAILED_PRECONDITION, "handshake message out of order", actions);
}

void Engine::OnReject(Conn* c, const wire::Reject& reject, std::vector<Action>* actions) {
  const int32_t code = reject.code;
  const std::string& why = reject.message;
  if (!c->outbound) {
    // The connector refused our proof: our secrets differ.
    ++stats_.refused;
    FERRY_LOG(FERRY_LOG_WARN, kLog,
              "refused a connection from " + c->address + " claiming to be '" +
                  c->peer_name + "': " + why +
                  " (wrong or missing job secret; no handler ran)");
    ConnFailed(c,
               Status(code == 0 ? FERRY_UNAUTHENTICATED : code,
                      c->address + " refused the connection: " + why),
               actions);
    return;
  }
  if (code == FERRY_ALREADY_EXISTS && !c->store) {
    // We lost a connect race: the peer's own connection will arrive.
    auto it = peers_.find(c->peer_id);
    if (it != peers_.end() && it->second->outbound == c) {
      it->second->waiting_for_theirs = true;
    }
    if (it != peers_.end() && it->second->dev_outbound == c) {
      it->second->dev_waiting_for_theirs = true;
    }
    CloseConnLocked(c);  // detaches it from the peer
    return;
  }
  ConnFailed(c,
             Status(code == 0 ? FERRY_UNAVAILABLE : code,
                    (c->store ? "the rendezvous store at " : "worker at ") + c->address +
                        " refused the connection: " + why),
             actions);
}

// Acceptor: who the connector claims to be. Checked here: its wire
// version and job; for a member, that it is not a replaced incarnation and
// that this connection should win a connect race. Answered with CHALLENGE.
void Engine::OnHello(Conn* c, wire::Reader& r, std::vector<Action>* actions) {
  wire::Hello hello;
  const bool well_formed = wire::DecodeHello(r, &hello);
  c->peer_id = hello.id;
  c->peer_incarnation = hello.incarnation;
  c->peer_name = hello.name;
  c->their_nonce = hello.nonce;
  if (!well_formed) {
    ++stats_.refused;
    RejectAndClose(c, FERRY_INVALID_ARGUMENT, "malformed HELLO", actions);
    return;
  }
  if (hello.wire_version != wire::kWireVersion) {
    ++stats_.refused;
    RejectAndClose(c, FERRY_INCOMPATIBLE,
                   "wire version " + std::to_string(hello.wire_version) +
                       " is not supported (this worker speaks " +
                       std::to_string(wire::kWireVersion) + ")",
                   actions);
    return;
  }
  if (hello.job != options_.job) {
    ++stats_.refused;
    FERRY_LOG(FERRY_LOG_WARN, kLog,
              "refused a connection from " + c->address + ": it belongs to job '" +
                  hello.job + "', this is job '" + options_.job + "'");
    RejectAndClose(c, FERRY_PERMISSION_DENIED,
                   "this is job '" + options_.job + "', not '" + hello.job + "'",
                   actions);
    return;
  }
  c->role = hello.role;
  c->store = c->role == wire::Role::kStoreClient;
  c->device = c->role == wire::Role::kMemberDevice;
  if (!c->store && !AdmitMemberConn(c, actions)) return;
  c->my_nonce = auth::RandomNonce();
  wire::Challenge challenge;
  challenge.id = self_id_;
  challenge.incarnation = self_incarnation_;
  challenge.nonce = c->my_nonce;
  challenge.mac = auth::AcceptorProof(options_.secret, options_.job, c->their_nonce,
                                      c->my_nonce, self_id_);
  c->state = Conn::State::kChallengeSent;
  SendHandshake(c, wire::Kind::kChallenge,
                [&](wire::Writer& w) { wire::EncodeChallenge(challenge, w); });
}

bool Engine::AdmitMemberConn(Conn* c, std::vector<Action>* actions) {
  auto it = peers_.find(c->peer_id);
  if (it == peers_.end()) return true;
  Peer* p = it->second.get();
  if (p->record.incarnation > c->peer_incarnation) {
    RejectAndClose(c, FERRY_FAILED_PRECONDITION,
                   "incarnation " + std::to_string(c->peer_incarnation) +
                       " of this worker has been replaced",
                   actions);
    return false;
  }
  // Connect race: the lower id's connection wins, whether still in its
  // handshake or already authenticated here. (Its acceptor may already
  // have sent calls on it, and takes it for the one.) A device connection
  // (HELLO's role) is a second connection, not a rival of the primary: the
  // same rule applies among device connections only.
  Conn* const& outbound = c->device ? p->dev_outbound : p->outbound;
  Conn* const& ready = c->device ? p->dev_conn : p->conn;
  const bool mine = outbound != nullptr || (ready != nullptr && ready->outbound);
  if (mine && p->record.incarnation == c->peer_incarnation && self_id_ < c->peer_id) {
    RejectAndClose(
        c, FERRY_ALREADY_EXISTS,
        c->device ? "device connection race: mine wins" : "connection race: mine wins",
        actions);
    return false;
  }
  if (p->record.incarnation == c->peer_incarnation) {
    (c->device ? p->dev_inbound : p->inbound) = c;
  }
  return true;
}

// Connector: the acceptor proves it holds the secret and says who it is;
// we answer with our own proof (AUTH).
void Engine::OnChallenge(Conn* c, wire::Reader& r, std::vector<Action>* actions) {
  wire::Challenge challenge;
  const bool well_formed = wire::DecodeChallenge(r, &challenge);
  c->their_nonce = challenge.nonce;
  const auto expect = auth::AcceptorProof(options_.secret, options_.job, c->my_nonce,
                                          c->their_nonce, challenge.id);
  if (!well_formed || !auth::Equal(challenge.mac, expect)) {
    ++stats_.refused;
    FERRY_LOG(FERRY_LOG_WARN, kLog,
              "closed the connection to " + c->address +
                  ": it could not prove it holds this job's secret");
    // Tell the acceptor too, so that the refusal is logged on both sides.
    wire::Reject reject{FERRY_UNAUTHENTICATED, "the job secrets differ"};
    SendHandshake(c, wire::Kind::kReject,
                  [&](wire::Writer& w) { wire::EncodeReject(reject, w); });
    ConnFailed(
        c,
        Status(FERRY_UNAUTHENTICATED,
               c->address + " does not hold this job's secret (set the "
                            "same FERRY_SECRET or FERRY_SECRET_FILE on every worker)"),
        actions);
    return;
  }
  if (!c->store &&
      (challenge.id != c->peer_id || challenge.incarnation != c->peer_incarnation)) {
    ConnFailed(c,
               Status(FERRY_PEER_GONE, "the address of worker '" + c->peer_name +
                                           "' now belongs to another worker: it is gone"),
               actions);
    return;
  }
  wire::Auth auth_msg;
  auth_msg.mac = auth::ConnectorProof(options_.secret, options_.job, c->their_nonce,
                                      c->my_nonce, c->store ? 0 : self_id_.load());
  c->state = Conn::State::kAuthSent;
  SendHandshake(c, wire::Kind::kAuth,
                [&](wire::Writer& w) { wire::EncodeAuth(auth_msg, w); });
}

// Acceptor: the connector's proof. Right: READY, and the connection carries
// traffic from now on. Wrong: REJECT.
void Engine::OnAuth(Conn* c, wire::Reader& r, std::vector<Action>* actions) {
  wire::Auth auth_msg;
  const bool well_formed = wire::DecodeAuth(r, &auth_msg);
  const auto expect = auth::ConnectorProof(options_.secret, options_.job, c->my_nonce,
                                           c->their_nonce, c->peer_id);
  if (!well_formed || !auth::Equal(auth_msg.mac, expect)) {
    ++stats_.refused;
    FERRY_LOG(FERRY_LOG_WARN, kLog,
              "refused a connection from " + c->address + " claiming to be '" +
                  c->peer_name + "': wrong or missing job secret");
    RejectAndClose(c, FERRY_UNAUTHENTICATED,
                   "authentication failed: wrong or missing job secret (set "
                   "FERRY_SECRET or FERRY_SECRET_FILE like the other workers)",
                   actions);
    return;
  }
  SendHandshake(c, wire::Kind::kReady, [](wire::Writer&) {});
  MakeReady(c, actions);
}

// The connection is authenticated: a store connection sends what waited
// for it; a member's becomes its peer's one connection (closing any other)
// and sends the peer's backlog in order.
void Engine::MakeReady(Conn* c, std::vector<Action>* actions) {
  c->state = Conn::State::kReady;
  c->last_heard = c->last_sent = Clock::now();
  if (c->store) {
    while (!c->backlog.empty()) {
      auto m = std::move(c->backlog.front());
      c->backlog.pop_front();
      SendOnConnLocked(c, std::move(m), 0);
    }
    return;
  }
  Peer* p = PeerForReadyConn(c, actions);
  if (p->gone) {
    CloseConnLocked(c);
    return;
  }
  if (c->device) {
    MakeDeviceConnReady(c, p);
    return;
  }
  if (p->conn != nullptr && p->conn != c) CloseConnLocked(p->conn);
  if (p->outbound != nullptr && p->outbound != c) CloseConnLocked(p->outbound);
  if (p->inbound != nullptr && p->inbound != c) CloseConnLocked(p->inbound);
  p->outbound = nullptr;
  p->inbound = nullptr;
  p->waiting_for_theirs = false;
  p->conn = c;
  const uint64_t kinds = c->slot->transport->info().memory_kinds;
  while (!p->backlog.empty()) {
    auto [seq, m] = std::move(p->backlog.front());
    p->backlog.pop_front();
    if ((kinds & NeededKinds(*m)) != NeededKinds(*m)) {
      // A device message queued for the primary when this worker guessed the
      // primary would be its device transport; the connection that won is
      // another (the two sides broke a priority tie differently): it waits
      // for the device connection instead.
      p->dev_backlog.emplace_back(seq, std::move(m));
      continue;
    }
    Status s = SendOnConnLocked(c, std::move(m), seq);
    if (!s.ok()) {
      FERRY_LOG(FERRY_LOG_ERROR, kLog,
                "sending to '" + p->record.name + "' failed: " + s.ToString());
    }
  }
  if (p->dev_backlog.empty()) return;
  if (p->dev_conn != nullptr && p->dev_conn->state == Conn::State::kReady) {
    MakeDeviceConnReady(p->dev_conn, p);  // sends what moved to its backlog
    return;
  }
  if (p->dev_outbound != nullptr || p->dev_inbound != nullptr ||
      p->dev_waiting_for_theirs) {
    return;
  }
  auto ep = route::Choose(LocalRoutes(), p->record.endpoints,
                          NeededKinds(*p->dev_backlog.front().second), p->record.name);
  Status s = ep.ok() ? ConnectToPeer(p, &ep.value()) : ep.status();
  if (!s.ok()) {
    FERRY_LOG(
        FERRY_LOG_ERROR, kLog,
        "device messages to '" + p->record.name + "' cannot be sent: " + s.ToString());
    p->dev_backlog.clear();
  }
}

// The same for a device connection: it becomes the peer's device
// connection and sends the device messages that waited for it.
void Engine::MakeDeviceConnReady(Conn* c, Peer* p) {
  if (p->dev_conn != nullptr && p->dev_conn != c) CloseConnLocked(p->dev_conn);
  if (p->dev_outbound != nullptr && p->dev_outbound != c)
    CloseConnLocked(p->dev_outbound);
  if (p->dev_inbound != nullptr && p->dev_inbound != c) CloseConnLocked(p->dev_inbound);
  p->dev_outbound = nullptr;
  p->dev_inbound = nullptr;
  p->dev_waiting_for_theirs = false;
  p->dev_conn = c;
  FERRY_LOG(FERRY_LOG_DEBUG, kLog,
            "device connection to '" + p->record.name + "' over " + c->slot->name +
                " is ready");
  while (!p->dev_backlog.empty()) {
    auto [seq, m] = std::move(p->dev_backlog.front());
    p->dev_backlog.pop_front();
    Status s = SendOnConnLocked(c, std::move(m), seq);
    if (!s.ok()) {
      FERRY_LOG(FERRY_LOG_ERROR, kLog,
                "sending to '" + p->record.name + "' over " + c->slot->name +
                    " failed: " + s.ToString());
    }
  }
}

// The peer an authenticated member connection belongs to: known from the
// store, or learnt from its HELLO (it joined and connected before the
// store's news reached us). A newer incarnation replaces the old peer.
Peer* Engine::PeerForReadyConn(Conn* c, std::vector<Action>* actions) {
  auto fresh = [c] {
    auto p = std::make_unique<Peer>();
    p->record.id = c->peer_id;
    p->record.incarnation = c->peer_incarnation;
    p->record.name = c->peer_name;
    return p;
  };
  auto it = peers_.find(c->peer_id);
  if (it == peers_.end()) {
    it = peers_.emplace(c->peer_id, fresh()).first;
    // Its other connection (primary or device) may be mid-handshake.
    AttachHandshakingConns(it->second.get());
  } else if (it->second->record.incarnation < c->peer_incarnation) {
    // A newer incarnation introduced itself before the store told us.
    Peer* old = it->second.get();
    if (!old->gone) {
      PeerGone(old,
               Status(FERRY_PEER_GONE, "worker '" + old->record.name + "' restarted"),
               actions);
    }
    it->second = fresh();
    AttachHandshakingConns(it->second.get());
  }
  return it->second.get();
}

void Engine::RejectAndClose(Conn* c, ferry_status_t code, const std::string& why,
                            std::vector<Action>* actions) {
  wire::Reject reject{code, why};
  SendHandshake(c, wire::Kind::kReject,
                [&](wire::Writer& w) { wire::EncodeReject(reject, w); });
  // A connection we opened, or one a peer's traffic already runs on, has
  // callers waiting behind it: fail them now with the reason instead of
  // leaving them to their deadlines.
  ConnFailed(c,
             Status(code, "refused the connection " +
                              std::string(c->outbound ? "to " : "from ") + c->address +
                              ": " + why),
             actions);
}

}  // namespace ferry
