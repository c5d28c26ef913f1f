#include "message_encoder.h"

#include "wire.h"

#include <cstring>

namespace ferry_tcp {
namespace {

constexpr size_t kSegmentMinSize = FERRY_STRUCT_SIZE(ferry_segment_t, length);
// Frames up to this size (prefix, table, header and inline segments) are
// sent from one buffer (see below).
constexpr size_t kCoalesceLimit = 1024;

}  // namespace

ferry_status_t EncodeMessage(const ferry_send_args_t& args, const SendLimits& limits,
                             SendOp* op, Status* error) {
  // 1. Shape of the arguments and the advertised limits, before any
  //    pointer is used.
  if (args.header_len > limits.max_header || args.header_len > limits.max_message) {
    return Report(
        error, Error(FERRY_RESOURCE_EXHAUSTED,
                     "tcp: header of %llu bytes exceeds max_header_size %u (or "
                     "max_message_size %llu)",
                     static_cast<unsigned long long>(args.header_len), limits.max_header,
                     static_cast<unsigned long long>(limits.max_message)));
  }
  if (args.header_len > 0 && args.header == nullptr) {
    return Report(
        error, Error(FERRY_INVALID_ARGUMENT, "tcp: header is NULL but header_len is %llu",
                     static_cast<unsigned long long>(args.header_len)));
  }
  const uint32_t n = args.num_segments;
  if (n > limits.max_segments) {
    return Report(
        error, Error(FERRY_RESOURCE_EXHAUSTED, "tcp: %u segments exceed max_segments %u",
                     n, limits.max_segments));
  }
  if (n > 0 && (args.segments == nullptr || args.segment_stride < kSegmentMinSize)) {
    return Report(error, Error(FERRY_INVALID_ARGUMENT,
                               "tcp: %u segments but segments=%p, segment_stride=%llu "
                               "(need a non-NULL array and a stride >= %zu)",
                               n, static_cast<const void*>(args.segments),
                               static_cast<unsigned long long>(args.segment_stride),
                               kSegmentMinSize));
  }

  // 2. One pass over the descriptors: check each (lengths only: the data
  //    pointers are never dereferenced here) and encode its table entry.
  //    Inline segments (chosen with the peer's limits) go first on the
  //    wire, so their iovecs are added now and the others after the loop.
  //    The meta buffer is bounded by the limits checked above.
  const size_t header_len = static_cast<size_t>(args.header_len);
  const size_t meta_len =
      wire::kPrefixSize + size_t{n} * wire::kSegmentEntrySize + header_len;
  char* meta = op->ReserveMeta(meta_len);
  iovec* iov = op->iov.Resize(size_t{n} + 1);
  iov[0] = iovec{meta, meta_len};
  size_t count = 1;
  uint64_t total = args.header_len;
  uint64_t inline_sum = 0;
  bool any_placed = false;
  char* entry = meta + wire::kPrefixSize;
  for (uint32_t i = 0; i < n; ++i, entry += wire::kSegmentEntrySize) {
    const ferry_segment_t* s =
        FERRY_ELEMENT_AT(const ferry_segment_t, args.segments, args.segment_stride, i);
    if (s->struct_size < kSegmentMinSize) {
      return Report(error,
                    Error(FERRY_INVALID_ARGUMENT,
                          "tcp: segment %u has struct_size %u, below the %zu bytes "
                          "that hold data and length",
                          i, s->struct_size, kSegmentMinSize));
    }
    const void* data = s->data;
    const uint64_t length = s->length;
    ferry_device_t device{FERRY_DEVICE_CPU, 0};
    if (FERRY_FIELD_PRESENT(s, ferry_segment_t, device)) device = s->device;
    if (length > limits.max_message - total) {
      return Report(error,
                    Error(FERRY_RESOURCE_EXHAUSTED,
                          "tcp: message too large: segment %u has %llu bytes, which "
                          "takes the message above max_message_size %llu",
                          i, static_cast<unsigned long long>(length),
                          static_cast<unsigned long long>(limits.max_message)));
    }
    total += length;
    if (length > 0 && data == nullptr) {
      return Report(error, Error(FERRY_INVALID_ARGUMENT,
                                 "tcp: segment %u has %llu bytes but data is NULL", i,
                                 static_cast<unsigned long long>(length)));
    }
    if (!IsHostDevice(device.type)) {
      return Report(error,
                    Error(FERRY_INVALID_ARGUMENT,
                          "tcp: segment %u is in device memory (DLPack device type "
                          "%d); the tcp transport moves host memory only (CPU or "
                          "CUDA host), route device tensors to another transport",
                          i, device.type));
    }
    uint16_t flags = 0;
    if (length <= limits.peer_inline_limit &&
        length <= limits.peer_inline_total - inline_sum) {
      flags = wire::kSegmentInline;
      inline_sum += length;
      if (length > 0) {
        iov[count++] = iovec{const_cast<void*>(data), static_cast<size_t>(length)};
      }
    } else {
      any_placed = true;
    }
    wire::SegmentEntry e;
    e.length = length;
    e.device_type = device.type;
    e.device_id = static_cast<uint16_t>(device.id);
    e.flags = flags;
    wire::EncodeSegment(e, entry);
  }
  if (any_placed) {
    entry = meta + wire::kPrefixSize;
    for (uint32_t i = 0; i < n; ++i, entry += wire::kSegmentEntrySize) {
      if ((wire::Get16(entry + 14) & wire::kSegmentInline) != 0) continue;
      const ferry_segment_t* s =
          FERRY_ELEMENT_AT(const ferry_segment_t, args.segments, args.segment_stride, i);
      // Not inline, so longer than the inline limit: never empty.
      iov[count++] = iovec{const_cast<void*>(s->data), static_cast<size_t>(s->length)};
    }
  }
  // A small all-inline message travels as one contiguous buffer: its
  // segments are copied behind the header, so the queue can write it with
  // send() rather than sendmsg() (whose msghdr and iovec import cost more,
  // on the benchmark VM about 150 ns per message, than copying a few hundred
  // bytes). Larger segments are never copied.
  const size_t frame_len = meta_len + static_cast<size_t>(inline_sum);
  if (!any_placed && count > 1 && frame_len <= kCoalesceLimit &&
      frame_len <= op->meta_capacity) {
    char* at = meta + meta_len;
    for (size_t i = 1; i < count; ++i) {
      std::memcpy(at, iov[i].iov_base, iov[i].iov_len);
      at += iov[i].iov_len;
    }
    iov[0].iov_len = frame_len;
    count = 1;
  }
  op->iov.Truncate(count);

  wire::Prefix prefix;
  prefix.header_len = static_cast<uint32_t>(header_len);
  prefix.num_segments = n;
  prefix.payload_bytes = total - args.header_len;
  wire::EncodePrefix(prefix, meta);
  if (header_len > 0) {
    std::memcpy(meta + meta_len - header_len, args.header, header_len);
  }
  return FERRY_OK;
}

}  // namespace ferry_tcp
