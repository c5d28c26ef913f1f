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
#include <cstring>

namespace ferry_fabric {

// Fills m's header, segments (inline_data pointing into `frame`), bulk
// descriptors, seq and sender_op from the `len`-byte MSG frame. A frame that
// lies (more than max_segments segments, tables, header or inline bytes past
// its end, an unknown segment mode, RMA segments when this side has no RMA
// (`rma` false), large segments without a sender operation) is
// FERRY_DATA_LOSS with the reason; m is then half-filled and must only be
// released.
Status ParseMsg(const char* frame, size_t len, uint32_t max_segments, bool rma, RxMsg* m);

namespace msg_parse {  // the steps both parsers share

// Why a frame whose fixed part is `h` cannot hold its segment table, or
// nullptr when it can (and the count is within max_segments). The caller
// read h from the frame, so len >= sizeof h.
inline const char* CheckTable(size_t len, const wire::Msg& h, uint32_t max_segments) {
  if (h.num_segments > max_segments) return "too many segments";
  if (len - sizeof h < h.num_segments * sizeof(wire::SegEntry)) {
    return "truncated segment table";
  }
  return nullptr;
}

// Sizes m's tables for h's segments and sets what h says of the message.
// RxMsgs are reused: a steady exchange keeps its segment count.
inline void Reset(const wire::Msg& h, RxMsg* m) {
  const size_t n = h.num_segments;
  if (m->segs.size() != n) {
    m->segs.resize(n);
    m->bulk.resize(n);
  }
  m->has_rma = m->has_stream = false;
  m->seq = h.head.aux;
  m->sender_op = h.op_id;
}

}  // namespace msg_parse

// ParseMsg's case of a frame without a sender operation (h.op_id == 0:
// every segment inline), for a caller that has read the fixed part `h`
// already: nullptr when m was filled, else why the frame is malformed
// (ParseMsg words the error). m is then half-filled, as with ParseMsg.
//
// Defined here, inline, because every small message runs through it on
// the latency path (Context::TryInlineArrival): as a call into another
// file it cost a frame, reloads of m's vectors per field and a second
// pass; here it is one pass of plain stores.
[[gnu::always_inline]] inline const char* ParseInlineMsg(const char* frame, size_t len,
                                                         const wire::Msg& h,
                                                         uint32_t max_segments,
                                                         RxMsg* m) {
  if (const char* why = msg_parse::CheckTable(len, h, max_segments)) return why;
  // No sender operation: every segment must be inline, so the header and
  // each segment's bytes follow the table in order.
  const size_t n = h.num_segments;
  const size_t header = sizeof h + n * sizeof(wire::SegEntry);
  if (len - header < h.header_len) return "truncated header";
  msg_parse::Reset(h, m);
  ferry_arrival_segment_t* const segs = m->segs.data();
  BulkSeg* const bulk = m->bulk.data();
  const char* const table = frame + sizeof h;
  size_t data = header + h.header_len;
  for (size_t i = 0; i < n; ++i) {
    wire::SegEntry e;
    std::memcpy(&e, table + i * sizeof e, sizeof e);
    if (e.mode != wire::kInline) {
      return e.mode == wire::kRma || e.mode == wire::kStream
                 ? "large segments without a sender operation"
                 : "unknown segment mode";
    }
    if (len - data < e.length) return "truncated inline segment";
    segs[i].struct_size = sizeof(ferry_arrival_segment_t);
    segs[i].reserved = 0;
    segs[i].length = e.length;
    segs[i].device = ferry_device_t{e.device_type, e.device_id};
    segs[i].inline_data = frame + data;
    bulk[i].mode = wire::kInline;
    bulk[i].length = e.length;
    data += e.length;
  }
  m->header = frame + header;
  m->header_len = h.header_len;
  return nullptr;
}

}  // namespace ferry_fabric
