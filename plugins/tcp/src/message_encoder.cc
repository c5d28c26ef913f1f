#include "message_encoder.h"

#include "wire.h"

#include <cstring>

namespace ferry_tcp {
namespace {

constexpr size_t kSegmentMinSize = FERRY_STRUCT_SIZE(ferry_segment_t, length);

struct SegmentView {
  const void* data;
  uint64_t length;
  ferry_device_t device;
};

SegmentView ViewSegment(const ferry_send_args_t& args, uint32_t i) {
  const ferry_segment_t* s = FERRY_ELEMENT_AT(const ferry_segment_t,
                                              args.segments,
                                              args.segment_stride, i);
  SegmentView v{s->data, s->length, ferry_device_t{FERRY_DEVICE_CPU, 0}};
  if (FERRY_FIELD_PRESENT(s, ferry_segment_t, device)) v.device = s->device;
  return v;
}

}  // namespace

Status EncodeMessage(const ferry_send_args_t& args, const SendLimits& limits,
                     SendOp* op) {
  // 1. Shape of the arguments and the advertised limits, before any
  //    pointer is used.
  if (args.header_len > limits.max_header) {
    return Error(FERRY_RESOURCE_EXHAUSTED,
                 "tcp: header of %llu bytes exceeds max_header_size %u",
                 static_cast<unsigned long long>(args.header_len),
                 limits.max_header);
  }
  if (args.header_len > 0 && args.header == nullptr) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "tcp: header is NULL but header_len is %llu",
                 static_cast<unsigned long long>(args.header_len));
  }
  if (args.num_segments > limits.max_segments) {
    return Error(FERRY_RESOURCE_EXHAUSTED,
                 "tcp: %u segments exceed max_segments %u", args.num_segments,
                 limits.max_segments);
  }
  if (args.num_segments > 0 &&
      (args.segments == nullptr || args.segment_stride < kSegmentMinSize)) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "tcp: %u segments but segments=%p, segment_stride=%llu "
                 "(need a non-NULL array and a stride >= %zu)",
                 args.num_segments, static_cast<const void*>(args.segments),
                 static_cast<unsigned long long>(args.segment_stride),
                 kSegmentMinSize);
  }
  uint64_t total = args.header_len;
  for (uint32_t i = 0; i < args.num_segments; ++i) {
    const ferry_segment_t* s = FERRY_ELEMENT_AT(
        const ferry_segment_t, args.segments, args.segment_stride, i);
    if (s->struct_size < kSegmentMinSize) {
      return Error(FERRY_INVALID_ARGUMENT,
                   "tcp: segment %u has struct_size %u, below the %zu bytes "
                   "that hold data and length",
                   i, s->struct_size, kSegmentMinSize);
    }
    SegmentView v = ViewSegment(args, i);
    if (v.length > limits.max_message - total) {
      return Error(FERRY_RESOURCE_EXHAUSTED,
                   "tcp: message too large: segment %u has %llu bytes, which "
                   "takes the message above max_message_size %llu",
                   i, static_cast<unsigned long long>(v.length),
                   static_cast<unsigned long long>(limits.max_message));
    }
    total += v.length;
    if (v.length > 0 && v.data == nullptr) {
      return Error(FERRY_INVALID_ARGUMENT,
                   "tcp: segment %u has %llu bytes but data is NULL", i,
                   static_cast<unsigned long long>(v.length));
    }
    if (!IsHostDevice(v.device.type)) {
      return Error(FERRY_INVALID_ARGUMENT,
                   "tcp: segment %u is in device memory (DLPack device type "
                   "%d); the tcp transport moves host memory only (CPU or "
                   "CUDA host), route device tensors to another transport",
                   i, v.device.type);
    }
  }

  // 2. Encode prefix + table + header into meta; inline segments (chosen
  //    with the peer's limits) go first on the wire.
  size_t meta_len = wire::kPrefixSize +
                    size_t{args.num_segments} * wire::kSegmentEntrySize +
                    static_cast<size_t>(args.header_len);
  char* meta = op->ReserveMeta(meta_len);
  wire::Prefix prefix;
  prefix.header_len = static_cast<uint32_t>(args.header_len);
  prefix.num_segments = args.num_segments;
  prefix.payload_bytes = total - args.header_len;
  wire::EncodePrefix(prefix, meta);

  op->iov.reserve(size_t{args.num_segments} + 1);
  op->iov.push_back(iovec{meta, meta_len});
  uint64_t inline_sum = 0;
  for (uint32_t i = 0; i < args.num_segments; ++i) {
    SegmentView v = ViewSegment(args, i);
    wire::SegmentEntry e;
    e.length = v.length;
    e.device_type = v.device.type;
    e.device_id = static_cast<uint16_t>(v.device.id);
    if (v.length <= limits.peer_inline_limit &&
        v.length <= limits.peer_inline_total - inline_sum) {
      e.flags = wire::kSegmentInline;
      inline_sum += v.length;
      if (v.length > 0) {
        op->iov.push_back(iovec{const_cast<void*>(v.data),
                                static_cast<size_t>(v.length)});
      }
    }
    wire::EncodeSegment(e, meta + wire::kPrefixSize + i * wire::kSegmentEntrySize);
  }
  for (uint32_t i = 0; i < args.num_segments; ++i) {
    SegmentView v = ViewSegment(args, i);
    const char* entry = meta + wire::kPrefixSize + i * wire::kSegmentEntrySize;
    bool is_inline = (wire::Get16(entry + 14) & wire::kSegmentInline) != 0;
    if (!is_inline && v.length > 0) {
      op->iov.push_back(
          iovec{const_cast<void*>(v.data), static_cast<size_t>(v.length)});
    }
  }
  if (args.header_len > 0) {
    std::memcpy(meta + meta_len - args.header_len, args.header,
                static_cast<size_t>(args.header_len));
  }
  return Status();
}

}  // namespace ferry_tcp
