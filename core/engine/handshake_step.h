// Which step of the connection handshake (handshake.cc) an arriving
// handshake message is, given how far its connection has come: a pure
// function of the two, so that the exchange's order can be fuzzed
// (fuzz/handshake_fuzzer.cc) without an engine.
#pragma once

#include "engine/connection.h"
#include "wire/messages.h"

namespace ferry {

// The messages of the handshake: the only ones a connection takes before
// it is authenticated (arrival.cc).
inline bool IsHandshake(wire::Kind k) {
  return k == wire::Kind::kHello || k == wire::Kind::kChallenge ||
         k == wire::Kind::kAuth || k == wire::Kind::kReady || k == wire::Kind::kReject;
}

enum class HandshakeStep {
  kReject,      // REJECT, in any state: the peer refused the connection
  kHello,       // acceptor: who the connector claims to be
  kChallenge,   // connector: the acceptor's proof
  kAuth,        // acceptor: the connector's proof
  kReady,       // connector: authenticated
  kDuplicate,   // a step this connection has passed (a transport may deliver twice)
  kOutOfOrder,  // anything else: refused
};

inline HandshakeStep NextHandshakeStep(wire::Kind kind, Conn::State state) {
  using K = wire::Kind;
  using S = Conn::State;
  if (kind == K::kReject) return HandshakeStep::kReject;
  if (kind == K::kHello && state == S::kAwaitHello) return HandshakeStep::kHello;
  if (kind == K::kChallenge && state == S::kHelloSent) return HandshakeStep::kChallenge;
  if (kind == K::kAuth && state == S::kChallengeSent) return HandshakeStep::kAuth;
  if (kind == K::kReady && state == S::kAuthSent) return HandshakeStep::kReady;
  const bool duplicate =
      (kind == K::kHello && (state == S::kChallengeSent || state == S::kReady)) ||
      (kind == K::kChallenge && (state == S::kAuthSent || state == S::kReady)) ||
      (kind == K::kAuth && state == S::kReady) ||
      (kind == K::kReady && state == S::kReady);
  return duplicate ? HandshakeStep::kDuplicate : HandshakeStep::kOutOfOrder;
}

}  // namespace ferry
