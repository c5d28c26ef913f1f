// The core's wire decoder (core/wire/messages.h): an arriving message's
// header, as a transport hands it to the engine (envelope, then body), read
// by the envelope decoder and then by the body decoder its kind selects, as
// the engine and agent do. A body that decodes is encoded again and must
// decode to the same bytes (encode . decode is stable), so a decoder that
// accepts what its encoder cannot reproduce is a finding too.
#include "fuzz_input.h"

#include "wire/messages.h"

#include <string_view>

namespace {

using namespace ferry::wire;

template <typename M, typename Enc>
void RoundTrip(const M& decoded, Enc encode) {
  std::vector<uint8_t> once;
  Writer w1(&once);
  encode(decoded, w1);
  M again;
  Reader r(once.data(), once.size());
  bool ok;
  if constexpr (std::is_same_v<M, Hello>) {
    ok = DecodeHello(r, &again);
  } else if constexpr (std::is_same_v<M, Challenge>) {
    ok = DecodeChallenge(r, &again);
  } else if constexpr (std::is_same_v<M, Auth>) {
    ok = DecodeAuth(r, &again);
  } else if constexpr (std::is_same_v<M, Reject>) {
    ok = DecodeReject(r, &again);
  } else {
    ok = Get(r, &again);
  }
  FUZZ_CHECK(ok);
  std::vector<uint8_t> twice;
  Writer w2(&twice);
  encode(again, w2);
  FUZZ_CHECK(once == twice);
}

template <typename M>
void DecodeBody(const uint8_t* body, size_t len) {
  M m;
  Reader r(body, len);
  if (Get(r, &m)) RoundTrip(m, [](const M& x, Writer& w) { Put(w, x); });
}

// The kinds whose bodies have a decoder. kStoreLeave has no body: it
// stands for a bare member record here.
constexpr Kind kDecoded[] = {
    Kind::kHello,       Kind::kChallenge,        Kind::kAuth,
    Kind::kReject,      Kind::kRequest,          Kind::kResponse,
    Kind::kCancel,      Kind::kControl,          Kind::kStoreJoin,
    Kind::kStoreJoined, Kind::kStoreMemberEvent, Kind::kStoreLeave};

// The body decoder the envelope's kind selects; a kind without one still
// picks one (by its value), so every decoder sees every input.
void DecodeByKind(Kind kind, const uint8_t* body, size_t len) {
  Reader r(body, len);
  switch (kind) {
    case Kind::kHello: {
      Hello m;
      if (DecodeHello(r, &m)) RoundTrip(m, EncodeHello);
      return;
    }
    case Kind::kChallenge: {
      Challenge m;
      if (DecodeChallenge(r, &m)) RoundTrip(m, EncodeChallenge);
      return;
    }
    case Kind::kAuth: {
      Auth m;
      if (DecodeAuth(r, &m)) RoundTrip(m, EncodeAuth);
      return;
    }
    case Kind::kReject: {
      Reject m;
      if (DecodeReject(r, &m)) RoundTrip(m, EncodeReject);
      return;
    }
    case Kind::kRequest:
      return DecodeBody<Request>(body, len);
    case Kind::kResponse:
      return DecodeBody<Response>(body, len);
    case Kind::kCancel:
      return DecodeBody<Cancel>(body, len);
    case Kind::kControl:
      return DecodeBody<Control>(body, len);
    case Kind::kStoreJoin:
      return DecodeBody<StoreJoin>(body, len);
    case Kind::kStoreJoined:
      return DecodeBody<StoreJoined>(body, len);
    case Kind::kStoreMemberEvent:
      return DecodeBody<StoreMemberEvent>(body, len);
    case Kind::kStoreLeave:
      return DecodeBody<MemberRecord>(body, len);
    default:
      constexpr size_t n = sizeof kDecoded / sizeof kDecoded[0];
      return DecodeByKind(kDecoded[static_cast<uint8_t>(kind) % n], body, len);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader r(data, size);
  Envelope e;
  uint8_t version = 0;
  const bool envelope_ok = DecodeEnvelope(r, &e, &version);
  if (size < kEnvelopeSize) {
    FUZZ_CHECK(!envelope_ok);
    return 0;
  }
  FUZZ_CHECK(r.remaining() == size - kEnvelopeSize);
  if (envelope_ok) {
    uint8_t out[kEnvelopeSize];
    EncodeEnvelopeAt(e, out);
    // The envelope encoder always writes this side's version.
    FUZZ_CHECK(std::memcmp(out, data, 2) == 0 && std::memcmp(out + 3, data + 3, 13) == 0);
  }
  DecodeByKind(e.kind, data + kEnvelopeSize, size - kEnvelopeSize);
  return 0;
}
