#include "handshake.h"

#include "shm_layout.h"

#include <cstring>

namespace ferry_shm {
namespace {

HandshakeMsg Base(uint32_t type) {
  HandshakeMsg m;
  std::memset(&m, 0, sizeof m);
  m.magic = kHandshakeMagic;
  m.wire_version = kWireVersion;
  m.type = type;
  return m;
}

bool RingSizeOk(uint64_t v) {
  return v >= (1ull << 20) && v <= (1ull << 30) && (v & (v - 1)) == 0;
}

}  // namespace

HandshakeMsg MakeHello(uint64_t ring_size, const uint64_t* probe, bool never_sleeps) {
  HandshakeMsg m = Base(kMsgHello);
  m.ring_size = ring_size;
  m.probe_address = reinterpret_cast<uintptr_t>(probe);
  m.probe_value = *probe;
  m.flags = never_sleeps ? kHelloNeverSleeps : 0;
  return m;
}

HandshakeMsg MakeReady(bool cma_readable) {
  HandshakeMsg m = Base(kMsgReady);
  m.cma_readable = cma_readable ? 1 : 0;
  return m;
}

HandshakeMsg MakeRefuse(const Status& why) {
  HandshakeMsg m = Base(kMsgRefuse);
  m.status = why.code;
  std::strncpy(m.reason, why.message.c_str(), sizeof m.reason - 1);
  return m;
}

Status ParseHandshake(const void* buf, size_t len, uint32_t expected_type,
                      HandshakeMsg* out) {
  if (len != sizeof(HandshakeMsg)) {
    return Error(FERRY_DATA_LOSS,
                 "shm: set-up message of %zu bytes (expected %zu): the peer "
                 "is not a ferry shm transport of this version",
                 len, sizeof(HandshakeMsg));
  }
  std::memcpy(out, buf, sizeof *out);
  out->reason[sizeof out->reason - 1] = '\0';
  if (out->magic != kHandshakeMagic) {
    return Error(FERRY_DATA_LOSS,
                 "shm: the peer is not a ferry shm transport (bad magic)");
  }
  if (out->wire_version != kWireVersion) {
    return Error(FERRY_INCOMPATIBLE,
                 "shm: the peer speaks shm wire version %u, this plugin speaks "
                 "%u: use the same ferry version on both sides",
                 out->wire_version, kWireVersion);
  }
  if (out->type == kMsgRefuse) {
    ferry_status_t code = out->status == FERRY_OK ? FERRY_UNAVAILABLE : out->status;
    return Error(code, "shm: refused by the peer: %s",
                 out->reason[0] ? out->reason : "no reason given");
  }
  if (out->type != expected_type) {
    return Error(FERRY_DATA_LOSS, "shm: unexpected set-up message type %u (wanted %u)",
                 out->type, expected_type);
  }
  if (out->type == kMsgHello && !RingSizeOk(out->ring_size)) {
    return Error(FERRY_DATA_LOSS, "shm: the peer announced an invalid ring of %llu bytes",
                 (unsigned long long)out->ring_size);
  }
  return Status();
}

}  // namespace ferry_shm
