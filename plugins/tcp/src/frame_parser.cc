#include "frame_parser.h"

namespace ferry_tcp {
namespace {

std::string HexBytes(const char* data, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += Format("%s%02x", i ? " " : "",
                  static_cast<unsigned>(static_cast<unsigned char>(data[i])));
  }
  return out;
}

}  // namespace

ParseResult ParseHello(const char* data, size_t size, wire::Hello* hello,
                       size_t* consumed, size_t* need, Status* error) {
  constexpr size_t kFixed = 8;  // magic, version, length
  if (size < kFixed) {
    *need = kFixed;
    return ParseResult::kNeedMore;
  }
  if (wire::Get32(data) != wire::kHelloMagic) {
    *error = Error(FERRY_DATA_LOSS,
                   "the peer did not start with a ferry-tcp hello (first "
                   "bytes: %s); it is not a ferry tcp endpoint",
                   HexBytes(data, 4).c_str());
    return ParseResult::kError;
  }
  uint16_t version = wire::Get16(data + 4);
  if (version != wire::kVersion) {
    *error = Error(FERRY_INCOMPATIBLE,
                   "the peer speaks ferry-tcp wire version %u, this side "
                   "speaks version %u: run the same ferry release on both",
                   version, wire::kVersion);
    return ParseResult::kError;
  }
  size_t length = wire::Get16(data + 6);
  if (length < wire::kHelloSize || length > wire::kHelloMaxSize) {
    *error = Error(FERRY_DATA_LOSS, "malformed hello: length %zu outside [%zu, %zu]",
                   length, wire::kHelloSize, wire::kHelloMaxSize);
    return ParseResult::kError;
  }
  if (size < length) {
    *need = length;
    return ParseResult::kNeedMore;
  }
  *hello = wire::DecodeHello(data);
  *consumed = length;
  return ParseResult::kDone;
}

ParseResult ParseMessage(const char* data, size_t size, const ReceiveLimits& limits,
                         std::vector<ferry_arrival_segment_t>* segments,
                         ParsedMessage* message, size_t* need, Status* error) {
  if (size < wire::kPrefixSize) {
    *need = wire::kPrefixSize;
    return ParseResult::kNeedMore;
  }
  if (wire::Get32(data) != wire::kFrameMagic) {
    *error = Error(FERRY_DATA_LOSS,
                   "bad frame magic (bytes %s, expected \"FRYM\"): the stream "
                   "is corrupt or the peer is not ferry-tcp",
                   HexBytes(data, 4).c_str());
    return ParseResult::kError;
  }
  wire::Prefix p = wire::DecodePrefix(data);
  const uint16_t reserved = wire::Get16(data + 6);
  if ((p.flags | reserved) != 0) {
    *error =
        Error(FERRY_DATA_LOSS, "frame has unknown flags 0x%x/0x%x", p.flags, reserved);
    return ParseResult::kError;
  }
  if (p.header_len > limits.max_header) {
    *error = Error(FERRY_DATA_LOSS,
                   "frame header length %u exceeds this side's "
                   "max_header_size %u",
                   p.header_len, limits.max_header);
    return ParseResult::kError;
  }
  if (p.num_segments > limits.max_segments) {
    *error =
        Error(FERRY_DATA_LOSS, "frame has %u segments, above this side's max_segments %u",
              p.num_segments, limits.max_segments);
    return ParseResult::kError;
  }
  if (p.payload_bytes > limits.max_message ||
      p.header_len > limits.max_message - p.payload_bytes) {
    *error = Error(FERRY_DATA_LOSS,
                   "frame announces %llu payload bytes, above this side's "
                   "max_message_size %llu",
                   static_cast<unsigned long long>(p.payload_bytes),
                   static_cast<unsigned long long>(limits.max_message));
    return ParseResult::kError;
  }
  const size_t table_end =
      wire::kPrefixSize + size_t{p.num_segments} * wire::kSegmentEntrySize;
  if (size < table_end) {
    *need = table_end;
    return ParseResult::kNeedMore;
  }

  // One pass over the segment table: lengths must add up (without overflow)
  // to payload_bytes and inline segments must fit the limits we announced.
  // The descriptors are filled on the way (num_segments <= max_segments, so
  // the vector never grows past what this side announced); inline_data is
  // set below, once the inline bytes are known to be buffered.
  if (segments->size() < p.num_segments) segments->resize(p.num_segments);
  ferry_arrival_segment_t* out = segments->data();
  const char* entry = data + wire::kPrefixSize;
  uint64_t sum = 0;
  uint64_t inline_sum = 0;
  bool any_inline = false;
  for (uint32_t i = 0; i < p.num_segments; ++i, entry += wire::kSegmentEntrySize) {
    const wire::SegmentEntry s = wire::DecodeSegment(entry);
    if ((s.flags & ~wire::kSegmentInline) != 0) {
      *error = Error(FERRY_DATA_LOSS, "segment %u has unknown flags 0x%x", i, s.flags);
      return ParseResult::kError;
    }
    if (s.length > p.payload_bytes - sum) {
      *error =
          Error(FERRY_DATA_LOSS, "segment lengths exceed the frame's payload_bytes %llu",
                static_cast<unsigned long long>(p.payload_bytes));
      return ParseResult::kError;
    }
    sum += s.length;
    if ((s.flags & wire::kSegmentInline) != 0) {
      if (s.length > limits.inline_limit || s.length > limits.inline_total - inline_sum) {
        *error = Error(FERRY_DATA_LOSS,
                       "inline segment %u (%llu bytes) exceeds this side's "
                       "inline limits (%u per segment, %u per message)",
                       i, static_cast<unsigned long long>(s.length), limits.inline_limit,
                       limits.inline_total);
        return ParseResult::kError;
      }
      inline_sum += s.length;
      any_inline = true;
    }
    ferry_arrival_segment_t& d = out[i];
    d.struct_size = sizeof(ferry_arrival_segment_t);
    d.reserved = 0;
    d.length = s.length;
    d.device.type = s.device_type;
    d.device.id = s.device_id;
    d.inline_data = nullptr;
  }
  if (sum != p.payload_bytes) {
    *error = Error(FERRY_DATA_LOSS, "segment lengths add up to %llu, frame says %llu",
                   static_cast<unsigned long long>(sum),
                   static_cast<unsigned long long>(p.payload_bytes));
    return ParseResult::kError;
  }
  // Bounded: table_end and header_len by the limits above, inline_sum by
  // inline_total.
  const size_t meta = table_end + p.header_len + static_cast<size_t>(inline_sum);
  if (size < meta) {
    *need = meta;
    return ParseResult::kNeedMore;
  }

  // Complete: inline bytes follow the header, in index order.
  if (any_inline) {
    const char* inline_at = data + table_end + p.header_len;
    entry = data + wire::kPrefixSize;
    for (uint32_t i = 0; i < p.num_segments; ++i, entry += wire::kSegmentEntrySize) {
      if ((wire::Get16(entry + 14) & wire::kSegmentInline) != 0) {
        out[i].inline_data = inline_at;
        inline_at += out[i].length;
      }
    }
  }
  message->meta_bytes = meta;
  message->header = data + table_end;
  message->header_len = p.header_len;
  message->num_segments = p.num_segments;
  message->placed_bytes = p.payload_bytes - inline_sum;
  return ParseResult::kDone;
}

}  // namespace ferry_tcp
