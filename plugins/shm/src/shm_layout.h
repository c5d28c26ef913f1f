// The bytes two processes share. Each connection has two segments, one per
// direction, each a sealed memfd created by its sender (the producer) and
// mapped by both sides:
//
//   offset 0     SegmentHeader   line 0: written once by the creator, before
//                                the fd is passed; the peer checks it
//   offset 64    OwnerLine       line 1: written by the creator
//   offset 128   ConsumerLine    line 2: written by the peer (the consumer)
//   offset 4096  ring            ring_size bytes (a power of two) of records
//
// Each line is written by one side only, so the producer's stores never
// share a cache line with the consumer's.
//
// The ring is single-producer/single-consumer. Positions count bytes from
// the start of the stream and never wrap (64 bits); a position's offset in
// the ring is `pos & (ring_size - 1)`. Every record starts on a cache line
// with a RecordHeader whose `seq` is its own position, stored last with
// release semantics: the consumer polls the `seq` of the record at its tail
// and finds a record exactly when seq == tail. No shared head index is
// needed, so a small message costs the consumer one cache-line transfer.
// Stale bytes from an earlier lap can never equal the tail position because
// the producer overwrites the next record's `seq` with kNoRecord before
// publishing a record. A record never crosses the end of the ring: a pad
// record fills the rest of the ring first.
//
// Nothing read from here is trusted: the reader checks every length, kind,
// offset and count against the segment's bounds before using it.
//
// This header is also the test suite's view of the layout (to corrupt a
// ring on purpose).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry_shm {

constexpr uint32_t kWireVersion = 1;
constexpr uint64_t kSegmentMagic = 0x314745534d485346ull;  // "FSHMSEG1"
constexpr uint64_t kCacheLine = 64;
constexpr uint64_t kRingOffset = 4096;  // the ring starts on its own page
constexpr uint64_t kRecordAlign = 128;  // every record starts a cache-line pair
constexpr uint64_t kNoRecord = ~0ull;   // a seq no record ever carries

constexpr uint32_t kRoleConnector = 1;  // created by the side that connected
constexpr uint32_t kRoleAcceptor = 2;   // created by the side that accepted

struct alignas(64) SegmentHeader {
  uint64_t magic;         // kSegmentMagic
  uint32_t wire_version;  // kWireVersion
  uint32_t role;          // kRoleConnector / kRoleAcceptor
  uint64_t ring_offset;   // kRingOffset
  uint64_t ring_size;
  int32_t creator_pid;  // informational (tests, debugging)
  uint32_t reserved;
  uint64_t nonce;  // random, per segment
};

struct alignas(64) OwnerLine {
  // 1 while the creator may sleep: the peer rings the creator's doorbell
  // after doing anything the creator may wait for (publishing a record into
  // its own ring, consuming from the creator's ring). The peer clears it.
  uint32_t sleeping;
  // 1 once the creator closed the connection. Set before it cancels its
  // sends, so a CMA read that finishes and then sees 0 here read a buffer
  // that was still lent to the transport.
  uint32_t closed;
};

struct alignas(64) ConsumerLine {
  uint64_t tail;       // position up to which the consumer took records
  uint64_t msgs_done;  // messages fully received (CMA reads finished) or
                       // discarded: completes the producer's CMA sends
};

struct SegmentControl {
  SegmentHeader header;
  OwnerLine owner;
  ConsumerLine consumer;
};
static_assert(sizeof(SegmentControl) == 3 * kCacheLine, "one line each");
static_assert(sizeof(SegmentControl) <= kRingOffset, "control fits its page");

// --- records ---------------------------------------------------------------

constexpr uint16_t kRecordPad = 1;    // skip to the end of the ring
constexpr uint16_t kRecordMsg = 2;    // a message: MsgBody ...
constexpr uint16_t kRecordChunk = 3;  // bytes of a ring-copied segment

struct RecordHeader {
  uint64_t seq;    // the record's position; stored last, with release
  uint32_t len;    // body bytes after this header
  uint16_t kind;   // kRecord*
  uint16_t flags;  // 0
};
static_assert(sizeof(RecordHeader) == 16, "wire size");

// A message record's body, packed so a small message fits two cache lines
// (a 16-byte header and a 64-byte payload make a 120-byte record):
//   MsgBody | SegmentDesc[num_segments] | uint64_t cma_address[num_cma] |
//   header (padded to 8) | each inline segment's bytes, in order, padded to 8
struct MsgBody {
  uint32_t header_len;
  uint16_t num_segments;
  uint16_t num_cma;  // segments of mode kSegCma: one address each
};
static_assert(sizeof(MsgBody) == 8, "wire size");

constexpr uint32_t kSegInline = 1;  // bytes are in this record
constexpr uint32_t kSegRing = 2;    // bytes follow in chunk records
constexpr uint32_t kSegCma = 3;     // the receiver reads them at the next
                                    // cma_address, in the sender's memory

// length_mode: the length in the low 56 bits, the mode (kSeg*) above.
constexpr unsigned kSegModeShift = 56;
constexpr uint64_t kSegLengthMask = (uint64_t{1} << kSegModeShift) - 1;

struct SegmentDesc {
  uint64_t length_mode;
  int32_t device_type;  // the sender's device (a hint for the receiver)
  int32_t device_id;
};
static_assert(sizeof(SegmentDesc) == 16, "wire size");

// A chunk record's body: ChunkBody, then the bytes. Chunks of one message
// follow its message record, in segment order and offset order.
struct ChunkBody {
  uint32_t segment;  // index of the segment in its message
  uint32_t reserved;
  uint64_t offset;  // of these bytes within the segment
};
static_assert(sizeof(ChunkBody) == 16, "wire size");

inline constexpr uint64_t AlignUp(uint64_t v, uint64_t a) {
  return (v + a - 1) & ~(a - 1);
}

// Bytes a record with `body_len` body bytes occupies in the ring.
inline constexpr uint64_t RecordSpan(uint64_t body_len) {
  return AlignUp(sizeof(RecordHeader) + body_len, kRecordAlign);
}

}  // namespace ferry_shm
