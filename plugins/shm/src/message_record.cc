// ParseMessageRecord: see message_record.h.
#include "message_record.h"

#include <cstring>

namespace ferry_shm {
namespace {

Status Corrupt(const char* fmt, unsigned long long a, unsigned long long b) {
  return Status(FERRY_DATA_LOSS, "shm: corrupt ring: " + Format(fmt, a, b));
}

}  // namespace

bool ParseMessageRecord(const RecordView& v, uint64_t at, uint32_t max_segments,
                        uint32_t max_header_size,
                        std::vector<ferry_arrival_segment_t>* arrival,
                        std::vector<InSegment>* segs, MessageRecord* out, Status* st) {
  MsgBody mb;
  if (v.len < sizeof mb) {
    *st = Corrupt("message record at byte %llu is only %llu bytes", at, v.len);
    return false;
  }
  std::memcpy(&mb, v.body, sizeof mb);
  if (mb.num_segments > max_segments || mb.header_len > max_header_size ||
      mb.num_cma > mb.num_segments) {
    *st = Status(FERRY_DATA_LOSS,
                 Format("shm: corrupt ring: message record claims %u segments (%u by "
                        "CMA) and a %u-byte header",
                        mb.num_segments, mb.num_cma, mb.header_len));
    return false;
  }
  const uint32_t n = mb.num_segments;
  const uint8_t* descs = v.body + sizeof mb;
  const uint8_t* cma = descs + uint64_t{n} * sizeof(SegmentDesc);
  const uint8_t* header = cma + uint64_t{mb.num_cma} * 8;
  uint64_t need = sizeof mb + uint64_t{n} * sizeof(SegmentDesc) +
                  uint64_t{mb.num_cma} * 8 + AlignUp(mb.header_len, 8);
  if (need > v.len) {
    *st = Corrupt("message record of %llu bytes is too short for its %llu-byte layout",
                  v.len, need);
    return false;
  }
  arrival->resize(n);
  segs->resize(n);
  uint64_t ring_bytes = 0;
  bool has_cma = false;
  uint32_t cma_seen = 0;
  for (uint32_t i = 0; i < n; ++i) {
    SegmentDesc d;
    std::memcpy(&d, descs + uint64_t{i} * sizeof d, sizeof d);
    const uint64_t length = d.length_mode & kSegLengthMask;
    const uint32_t mode = static_cast<uint32_t>(d.length_mode >> kSegModeShift);
    InSegment& s = (*segs)[i];
    s = InSegment{length, mode, 0, nullptr, 0};
    ferry_arrival_segment_t& a = (*arrival)[i];
    a.struct_size = sizeof a;
    a.reserved = 0;
    a.length = length;
    a.device = ferry_device_t{d.device_type, d.device_id};
    a.inline_data = nullptr;
    switch (mode) {
      case kSegInline:
        if (length > v.len - need) {
          *st = Corrupt("inline segment of %llu bytes overruns its record by %llu bytes",
                        length, length - (v.len - need));
          return false;
        }
        a.inline_data = v.body + need;
        need += AlignUp(length, 8);
        break;
      case kSegRing:
        if (length == 0 || length > kSegLengthMask - ring_bytes) {
          *st = Corrupt("ring-copied segment %llu has an impossible length %llu", i,
                        length);
          return false;
        }
        ring_bytes += length;
        break;
      case kSegCma:
        if (cma_seen == mb.num_cma) {
          *st = Corrupt(
              "message record has more CMA segments than its %llu addresses (%llu)",
              mb.num_cma, i);
          return false;
        }
        std::memcpy(&s.address, cma + uint64_t{cma_seen++} * 8, 8);
        has_cma = true;
        break;
      default:
        *st = Corrupt("segment %llu has unknown mode %llu", i, mode);
        return false;
    }
  }
  if (need != v.len || cma_seen != mb.num_cma) {
    *st = Corrupt("message record is %llu bytes but its contents need %llu", v.len, need);
    return false;
  }
  out->header = header;
  out->header_len = mb.header_len;
  out->ring_bytes = ring_bytes;
  out->has_cma = has_cma;
  return true;
}

}  // namespace ferry_shm
