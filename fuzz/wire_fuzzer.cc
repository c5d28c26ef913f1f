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

// Every body decoder, chosen by the envelope's kind; a kind no decoder
// takes still picks one (kind % 12), so every decoder sees every input.
void DecodeByKind(uint8_t kind, const uint8_t* body, size_t len) {
  Reader r(body, len);
  switch (kind % 12) {
    case 0: {
      Hello m;
      if (DecodeHello(r, &m)) RoundTrip(m, EncodeHello);
      return;
    }
    case 1: {
      Challenge m;
      if (DecodeChallenge(r, &m)) RoundTrip(m, EncodeChallenge);
      return;
    }
    case 2: {
      Auth m;
      if (DecodeAuth(r, &m)) RoundTrip(m, EncodeAuth);
      return;
    }
    case 3: {
      Reject m;
      if (DecodeReject(r, &m)) RoundTrip(m, EncodeReject);
      return;
    }
    case 4:
      return DecodeBody<Request>(body, len);
    case 5:
      return DecodeBody<Response>(body, len);
    case 6:
      return DecodeBody<Cancel>(body, len);
    case 7:
      return DecodeBody<Control>(body, len);
    case 8:
      return DecodeBody<StoreJoin>(body, len);
    case 9:
      return DecodeBody<StoreJoined>(body, len);
    case 10:
      return DecodeBody<StoreMemberEvent>(body, len);
    default:
      return DecodeBody<MemberRecord>(body, len);
  }
}

uint8_t DecoderFor(Kind k) {
  switch (k) {
    case Kind::kHello:
      return 0;
    case Kind::kChallenge:
      return 1;
    case Kind::kAuth:
      return 2;
    case Kind::kReject:
      return 3;
    case Kind::kRequest:
      return 4;
    case Kind::kResponse:
      return 5;
    case Kind::kCancel:
      return 6;
    case Kind::kControl:
      return 7;
    case Kind::kStoreJoin:
      return 8;
    case Kind::kStoreJoined:
      return 9;
    case Kind::kStoreMemberEvent:
      return 10;
    default:
      return static_cast<uint8_t>(k);
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
  DecodeByKind(DecoderFor(e.kind), data + kEnvelopeSize, size - kEnvelopeSize);
  return 0;
}
