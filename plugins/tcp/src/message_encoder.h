// Checks a host's send() arguments and encodes them into a SendOp: every
// limit is checked before any pointer the host gave is used (a segment that
// claims a huge length is refused without ever touching its data), and the
// segment bytes themselves are only referenced, never copied.
#pragma once

#include "send_op.h"
#include "status.h"

#include <ferry/transport.h>

#include <cstdint>

namespace ferry_tcp {

// The limits a send must respect: the smaller of this side's advertised
// limits and the peer's announced receive limits, plus the peer's inline
// limits, which decide which segments travel inline.
struct SendLimits {
  uint32_t max_header = 0;
  uint32_t max_segments = 0;
  uint64_t max_message = 0;
  uint32_t peer_inline_limit = 0;
  uint32_t peer_inline_total = 0;
};

// Fills op->meta and op->iov and returns FERRY_OK, or fills *error and
// returns its code (then nothing about `op` matters).
ferry_status_t EncodeMessage(const ferry_send_args_t& args, const SendLimits& limits,
                             SendOp* op, Status* error);

// True for the devices whose memory the CPU can read and write directly.
inline bool IsHostDevice(int32_t type) {
  return type == FERRY_DEVICE_CPU || type == FERRY_DEVICE_CUDA_HOST;
}

}  // namespace ferry_tcp
