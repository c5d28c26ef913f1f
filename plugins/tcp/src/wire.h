// The ferry-tcp wire format, version 1. Header-only so the tests can speak it
// from raw sockets. All integers are little-endian. README.md has the same
// layout as a table.
//
// A connection starts with one HELLO from each side (sent at once, without
// waiting for the peer's, so connecting costs no extra round trip), then
// carries MESSAGE frames back to back:
//
//   HELLO (40 bytes)
//     0  u32 magic "FRYH"        4  u16 version (1)    6  u16 hello length
//     8  u32 flags (0)          12  u32 max_header    16  u32 max_segments
//    20  u32 inline_limit       24  u32 inline_total  28  u32 reserved
//    32  u64 max_message
//   A receiver reads `hello length` bytes (>= 40), so later versions may
//   append fields. The limits are the sender's *receive* limits: the peer
//   checks its sends against them and chooses which segments go inline.
//
//   MESSAGE
//     prefix (24 bytes):
//       0  u32 magic "FRYM"   4  u16 flags (0)   6  u16 reserved (0)
//       8  u32 header_len    12  u32 num_segments
//      16  u64 payload_bytes (sum of all segment lengths)
//     segment table: num_segments entries of 16 bytes:
//       0  u64 length   8  i32 device type (DLPack code)
//      12  u16 device id   14  u16 flags (bit 0: inline)
//     header: header_len bytes
//     payload: first the inline segments in index order, then the others
//       in index order.
//   Putting inline segments first lets the receiver hand the host every small
//   segment in the ARRIVAL event and then stream the large ones straight
//   into the buffers the host places, whatever their index order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ferry_tcp::wire {

constexpr uint16_t kVersion = 1;
constexpr uint32_t kHelloMagic = 0x48595246;  // "FRYH" in memory order
constexpr uint32_t kFrameMagic = 0x4D595246;  // "FRYM"
constexpr size_t kHelloSize = 40;
constexpr size_t kHelloMaxSize = 1024;  // larger is refused as malformed
constexpr size_t kPrefixSize = 24;
constexpr size_t kSegmentEntrySize = 16;
constexpr uint16_t kSegmentInline = 1;

// Every receiver accepts inline segments of at least this size, so a sender
// that has not yet seen the peer's hello may inline up to it.
constexpr uint32_t kMinInline = 4096;
// writev/recvmsg take at most IOV_MAX (1024) pieces; a message uses one for
// prefix+table+header and one per segment.
constexpr uint32_t kMaxSegmentsLimit = 1000;

// Fixed-size little-endian fields, read and written with memcpy (one load or
// store each: no alignment assumed, no byte loops). The wire is
// little-endian; a big-endian host swaps bytes on the way in and out.
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) && \
    defined(__ORDER_BIG_ENDIAN__)
constexpr bool kHostIsLittleEndian = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ||
                  __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__,
              "ferry-tcp's wire code supports little- and big-endian hosts");
#else
#error "ferry-tcp needs __BYTE_ORDER__ to encode its little-endian wire format"
#endif

inline uint16_t ToLE(uint16_t v) {
  return kHostIsLittleEndian ? v : __builtin_bswap16(v);
}
inline uint32_t ToLE(uint32_t v) {
  return kHostIsLittleEndian ? v : __builtin_bswap32(v);
}
inline uint64_t ToLE(uint64_t v) {
  return kHostIsLittleEndian ? v : __builtin_bswap64(v);
}

inline void Put16(char* p, uint16_t v) {
  v = ToLE(v);
  std::memcpy(p, &v, sizeof v);
}
inline void Put32(char* p, uint32_t v) {
  v = ToLE(v);
  std::memcpy(p, &v, sizeof v);
}
inline void Put64(char* p, uint64_t v) {
  v = ToLE(v);
  std::memcpy(p, &v, sizeof v);
}
inline uint16_t Get16(const char* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return ToLE(v);
}
inline uint32_t Get32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return ToLE(v);
}
inline uint64_t Get64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return ToLE(v);
}

// A side's receive limits, as announced in its hello.
struct Hello {
  uint16_t version = kVersion;
  uint16_t length = kHelloSize;
  uint32_t flags = 0;
  uint32_t max_header = 0;
  uint32_t max_segments = 0;
  uint32_t inline_limit = 0;
  uint32_t inline_total = 0;
  uint64_t max_message = 0;
};

inline void EncodeHello(const Hello& h, char out[kHelloSize]) {
  std::memset(out, 0, kHelloSize);
  Put32(out + 0, kHelloMagic);
  Put16(out + 4, h.version);
  Put16(out + 6, static_cast<uint16_t>(kHelloSize));
  Put32(out + 8, h.flags);
  Put32(out + 12, h.max_header);
  Put32(out + 16, h.max_segments);
  Put32(out + 20, h.inline_limit);
  Put32(out + 24, h.inline_total);
  Put64(out + 32, h.max_message);
}

// Fields of `in` (at least kHelloSize bytes, magic already checked).
inline Hello DecodeHello(const char* in) {
  Hello h;
  h.version = Get16(in + 4);
  h.length = Get16(in + 6);
  h.flags = Get32(in + 8);
  h.max_header = Get32(in + 12);
  h.max_segments = Get32(in + 16);
  h.inline_limit = Get32(in + 20);
  h.inline_total = Get32(in + 24);
  h.max_message = Get64(in + 32);
  return h;
}

struct Prefix {
  uint16_t flags = 0;
  uint32_t header_len = 0;
  uint32_t num_segments = 0;
  uint64_t payload_bytes = 0;
};

inline void EncodePrefix(const Prefix& p, char out[kPrefixSize]) {
  Put32(out + 0, kFrameMagic);
  Put16(out + 4, p.flags);
  Put16(out + 6, 0);
  Put32(out + 8, p.header_len);
  Put32(out + 12, p.num_segments);
  Put64(out + 16, p.payload_bytes);
}

inline Prefix DecodePrefix(const char* in) {
  Prefix p;
  p.flags = Get16(in + 4);
  p.header_len = Get32(in + 8);
  p.num_segments = Get32(in + 12);
  p.payload_bytes = Get64(in + 16);
  return p;
}

struct SegmentEntry {
  uint64_t length = 0;
  int32_t device_type = 0;
  uint16_t device_id = 0;
  uint16_t flags = 0;
};

inline void EncodeSegment(const SegmentEntry& s, char out[kSegmentEntrySize]) {
  Put64(out + 0, s.length);
  Put32(out + 8, static_cast<uint32_t>(s.device_type));
  Put16(out + 12, s.device_id);
  Put16(out + 14, s.flags);
}

inline SegmentEntry DecodeSegment(const char* in) {
  SegmentEntry s;
  s.length = Get64(in + 0);
  s.device_type = static_cast<int32_t>(Get32(in + 8));
  s.device_id = Get16(in + 12);
  s.flags = Get16(in + 14);
  return s;
}

}  // namespace ferry_tcp::wire
