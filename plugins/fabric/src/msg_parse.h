// Parsing one MSG frame, as it came from the network: every count, length
// and offset in it is checked against the frame before anything is read
// through it. On its own (not a Context method) so that it can be tested with
// hand-made frames (tests/msg_parse_test.cc).
#pragma once

#include "messages.h"
#include "status.h"
#include "wire.h"

#include <cstddef>
#include <cstdint>

namespace ferry_fabric {

// Fills m's header, segments (inline_data pointing into `frame`), bulk
// descriptors, seq and sender_op from the `len`-byte MSG frame. A frame that
// lies (more than max_segments segments, tables, header or inline bytes past
// its end, an unknown segment mode, RMA segments when this side has no RMA
// (`rma` false), large segments without a sender operation) is
// FERRY_DATA_LOSS with the reason; m is then half-filled and must only be
// released.
Status ParseMsg(const char* frame, size_t len, uint32_t max_segments, bool rma,
                RxMsg* m);

// ParseMsg's case of a frame without a sender operation (h.op_id == 0:
// every segment inline), for a caller that has read the fixed part `h`
// already: nullptr when m was filled, else why the frame is malformed
// (ParseMsg words the error). m is then half-filled, as with ParseMsg.
const char* ParseInlineMsg(const char* frame, size_t len, const wire::Msg& h,
                           uint32_t max_segments, RxMsg* m);

}  // namespace ferry_fabric
