// ParseMsg: see msg_parse.h.
#include "msg_parse.h"

#include <cstring>

namespace ferry_fabric {
namespace {

// Entry `i` of the segment table at `table`, copied into m's arrival
// segment and bulk descriptor `i` (inline_data unset: the caller knows where
// the bytes are).
wire::SegEntry DescribeSegment(const char* table, size_t i, RxMsg* m) {
  wire::SegEntry e;
  std::memcpy(&e, table + i * sizeof e, sizeof e);
  ferry_arrival_segment_t& s = m->segs[i];
  s.struct_size = sizeof(ferry_arrival_segment_t);
  s.reserved = 0;
  s.length = e.length;
  s.device = ferry_device_t{e.device_type, e.device_id};
  s.inline_data = nullptr;
  m->bulk[i].mode = e.mode;
  m->bulk[i].length = e.length;
  return e;
}

}  // namespace

Status ParseMsg(const char* frame, size_t len, uint32_t max_segments, bool rma,
                RxMsg* m) {
  auto bad = [&](const char* why) {
    return Error(FERRY_DATA_LOSS,
                 "fabric: malformed message from the peer (%s; %zu-byte frame)", why,
                 len);
  };
  wire::Msg h;
  if (!wire::Read(frame, len, &h)) return bad("shorter than its fixed part");
  if (h.op_id == 0) {
    const char* why = ParseInlineMsg(frame, len, h, max_segments, m);
    return why == nullptr ? Status() : bad(why);
  }
  if (const char* why = msg_parse::CheckTable(len, h, max_segments)) return bad(why);
  const size_t n = h.num_segments;
  size_t off = sizeof h;
  msg_parse::Reset(h, m);
  size_t remote = 0;
  for (size_t i = 0; i < n; ++i) {
    const wire::SegEntry e = DescribeSegment(frame + off, i, m);
    if (e.mode == wire::kRma) {
      ++remote;
      m->has_rma = true;
    } else if (e.mode == wire::kStream) {
      m->has_stream = true;
    } else if (e.mode != wire::kInline) {
      return bad("unknown segment mode");
    }
  }
  off += n * sizeof(wire::SegEntry);
  if (m->has_rma && !rma) return bad("RMA segments, but this side has no RMA");
  if (len - off < remote * sizeof(wire::RemoteEntry)) return bad("truncated RMA table");
  for (size_t i = 0; i < n; ++i) {
    if (m->bulk[i].mode != wire::kRma) continue;
    std::memcpy(&m->bulk[i].remote, frame + off, sizeof(wire::RemoteEntry));
    off += sizeof(wire::RemoteEntry);
  }
  if (len - off < h.header_len) return bad("truncated header");
  m->header = frame + off;
  m->header_len = h.header_len;
  off += h.header_len;
  for (size_t i = 0; i < n; ++i) {
    if (m->bulk[i].mode != wire::kInline) continue;
    if (len - off < m->segs[i].length) return bad("truncated inline segment");
    m->segs[i].inline_data = frame + off;
    off += m->segs[i].length;
  }
  return Status();
}

}  // namespace ferry_fabric
