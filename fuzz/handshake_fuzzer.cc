// The connection handshake (core/engine/handshake.cc): one connection of a
// worker, acceptor or connector, fed a sequence of arriving headers from a
// peer. Each goes through what the engine runs on it: the envelope decoder
// and version check (arrival.cc), IsHandshake and NextHandshakeStep (the
// order of the exchange, engine/handshake_step.h), the body decoders and
// the proof checks (engine/auth.h) with this worker's secret. The property
// checked: a connection is ready only after the peer proved it holds the
// secret. Seeds (make_seeds.cc) hold whole valid exchanges against the
// fixed nonce below, so the fuzzer starts from authenticated states too.
#include "fuzz_input.h"

#include "engine/auth.h"
#include "engine/handshake_step.h"
#include "wire/messages.h"

namespace {

using namespace ferry;
using S = Conn::State;

// This worker, as make_seeds.cc knows it.
const std::string kJob = "fuzzjob";
const std::string kSecret = "fuzz-secret";
constexpr uint8_t kMyNonceByte = 0x5a;

struct Connection {
  S state;
  bool outbound;
  uint64_t peer_id = 0;
  auth::Nonce my_nonce;
  auth::Nonce their_nonce{};
  bool authenticated = false;  // the peer's proof checked out
};

// One arriving header; false once the connection is closed.
bool Arrive(Connection* c, std::string_view header) {
  wire::Reader r(header.data(), header.size());
  wire::Envelope env;
  uint8_t version = 0;
  if (!wire::DecodeEnvelope(r, &env, &version) || version != wire::kWireVersion) {
    return false;
  }
  if (!IsHandshake(env.kind)) {
    // The connector takes anything after its AUTH as READY being on its way.
    if (c->outbound && c->state == S::kAuthSent) c->state = S::kReady;
    if (c->state == S::kReady) FUZZ_CHECK(c->authenticated);
    return c->state == S::kReady;  // else: "authenticate first"
  }
  switch (NextHandshakeStep(env.kind, c->state)) {
    case HandshakeStep::kReject: {
      wire::Reject reject;
      wire::DecodeReject(r, &reject);
      return false;
    }
    case HandshakeStep::kHello: {
      FUZZ_CHECK(!c->outbound);
      wire::Hello hello;
      if (!wire::DecodeHello(r, &hello) || hello.wire_version != wire::kWireVersion ||
          hello.job != kJob) {
        return false;
      }
      c->peer_id = hello.id;
      c->their_nonce = hello.nonce;
      c->state = S::kChallengeSent;
      return true;
    }
    case HandshakeStep::kChallenge: {
      FUZZ_CHECK(c->outbound);
      wire::Challenge ch;
      const bool ok = wire::DecodeChallenge(r, &ch);
      c->their_nonce = ch.nonce;
      const auto expect =
          auth::AcceptorProof(kSecret, kJob, c->my_nonce, c->their_nonce, ch.id);
      if (!ok || !auth::Equal(ch.mac, expect)) return false;
      c->authenticated = true;
      c->state = S::kAuthSent;
      return true;
    }
    case HandshakeStep::kAuth: {
      FUZZ_CHECK(!c->outbound);
      wire::Auth a;
      const bool ok = wire::DecodeAuth(r, &a);
      const auto expect =
          auth::ConnectorProof(kSecret, kJob, c->my_nonce, c->their_nonce, c->peer_id);
      if (!ok || !auth::Equal(a.mac, expect)) return false;
      c->authenticated = true;
      c->state = S::kReady;
      return true;
    }
    case HandshakeStep::kReady:
      FUZZ_CHECK(c->outbound && c->authenticated);
      c->state = S::kReady;
      return true;
    case HandshakeStep::kDuplicate:
      return true;
    case HandshakeStep::kOutOfOrder:
      return false;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ferry_fuzz::Input in(data, size);
  Connection c;
  c.outbound = (in.Byte() & 1) != 0;
  c.state = c.outbound ? S::kHelloSent : S::kAwaitHello;
  c.my_nonce.fill(kMyNonceByte);
  while (!in.empty()) {
    if (!Arrive(&c, in.Frame())) break;
  }
  return 0;
}
