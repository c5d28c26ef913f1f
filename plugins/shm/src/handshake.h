// The set-up messages exchanged over the Unix socket. Both sides send HELLO
// at once (with two fds: their sending segment and their doorbell eventfd),
// then, having mapped the peer's segment and probed whether it may read the
// peer's memory with process_vm_readv, READY. A side that refuses the other
// sends REFUSE with a status and a reason, then closes.
//
//   connector                          acceptor
//     HELLO(ring, probe, flags) + fds  ->
//                                      <-  HELLO + fds
//     READY(cma_readable)              ->
//                                      <-  READY
#pragma once

#include "status.h"

#include <cstddef>
#include <cstdint>

namespace ferry_shm {

constexpr uint64_t kHandshakeMagic = 0x4d48535952524546ull;  // "FERRYSHM"
constexpr uint32_t kMsgHello = 1;
constexpr uint32_t kMsgReady = 2;
constexpr uint32_t kMsgRefuse = 3;

// HELLO flags.
constexpr uint32_t kHelloNeverSleeps = 1;  // busy-poll: never ring my doorbell

struct HandshakeMsg {
  uint64_t magic;          // kHandshakeMagic
  uint32_t wire_version;   // kWireVersion
  uint32_t type;           // kMsg*
  uint64_t ring_size;      // HELLO: the ring of the segment passed with it
  uint64_t probe_address;  // HELLO: a word of the sender's memory...
  uint64_t probe_value;    // ...and its value, for the CMA probe
  uint32_t flags;          // HELLO: kHello*
  int32_t status;          // REFUSE: a ferry status code
  uint32_t cma_readable;   // READY: 1 = I can read your memory (CMA)
  uint32_t reserved;
  char reason[192];  // REFUSE: NUL-terminated
};

HandshakeMsg MakeHello(uint64_t ring_size, const uint64_t* probe, bool never_sleeps);
HandshakeMsg MakeReady(bool cma_readable);
HandshakeMsg MakeRefuse(const Status& why);

// Checks a received message: its size, magic and version, then its type.
// A REFUSE becomes its own status and reason ("refused by the peer: ...").
Status ParseHandshake(const void* buf, size_t len, uint32_t expected_type,
                      HandshakeMsg* out);

}  // namespace ferry_shm
