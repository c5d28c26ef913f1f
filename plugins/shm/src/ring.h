// The single-producer/single-consumer record ring (layout: shm_layout.h).
// RingWriter runs in the sending process, RingReader in the receiving one;
// each keeps its own position privately and shares only what the other must
// see: the writer each record's `seq`, the reader its tail in ConsumerLine.
// The busy path is plain loads and stores plus one release store per
// record: no syscalls, no locks, no read-modify-writes.
#pragma once

#include "shm_layout.h"
#include "status.h"

#include <cstdint>

namespace ferry_shm {

// Traffic that never backs up (request/response, a ping-pong) goes back to
// offset 0 whenever the consumer has drained the ring and the writer is at
// least this far in. Its records then cycle through four pages that stay in
// both processes' caches and TLBs instead of walking the whole ring, where
// every 32nd 64-byte record starts a new page and its cache and TLB misses
// land in the round trip's tail. Untouched pages are never even allocated.
// A ring that holds records (streaming, a slow receiver) fills as usual.
constexpr uint64_t kHotBytes = 16 << 10;

class RingWriter {
 public:
  void Init(uint8_t* ring, uint64_t size, ConsumerLine* consumer);

  // Space for a record of `body_len` bytes (<= size / 4), writing a pad
  // record first if the record would cross the end of the ring, or to go
  // back to offset 0 of a drained ring (kHotBytes). Returns
  // the body to fill, or nullptr when the ring has no room now, or when
  // *st was set (the consumer's tail is impossible: a corrupt ring).
  uint8_t* Reserve(uint64_t body_len, Status* st);
  // Publishes the record Reserve() returned.
  void Commit(uint16_t kind);

  // True when a record of `body_len` bytes would fit now (refreshes the
  // consumer's tail if needed). For the idle check only.
  bool HasRoom(uint64_t body_len, Status* st);
  uint64_t head() const { return head_; }

 private:
  RecordHeader* At(uint64_t pos) const {
    return reinterpret_cast<RecordHeader*>(ring_ + (pos & mask_));
  }
  // True when `need` bytes from head_ are free (plus the next record's seq).
  bool Free(uint64_t need, Status* st);
  // True when the record should go to offset 0 now, behind a pad: head_ is
  // at least kHotBytes into the ring and the consumer has taken everything.
  bool WrapEarly(uint64_t span, uint64_t to_end);
  void Publish(uint64_t span, uint32_t len, uint16_t kind);
  // A pad record over the `to_end` bytes left before the ring's end.
  void PadToEnd(uint64_t to_end);

  uint8_t* ring_ = nullptr;
  uint64_t size_ = 0, mask_ = 0;
  ConsumerLine* consumer_ = nullptr;
  uint64_t head_ = 0;        // next record's position
  uint64_t tail_cache_ = 0;  // the consumer's tail, as last read
  uint64_t reserved_len_ = 0;
  uint64_t next_wrap_check_ = 0;  // head_ at which WrapEarly looks again
};

// A validated record at the reader's tail.
struct RecordView {
  uint16_t kind = 0;
  uint32_t len = 0;  // body bytes
  const uint8_t* body = nullptr;
  uint64_t span = 0;  // ring bytes it occupies
};

class RingReader {
 public:
  void Init(const uint8_t* ring, uint64_t size, ConsumerLine* consumer);

  // The record at the tail, pad records skipped. False when none is
  // published yet, or when *st was set (a corrupt record: DATA_LOSS).
  // Skipping a pad frees ring space: *freed is set then (it is left alone
  // otherwise), so the caller can tell a producer that may be waiting.
  bool Peek(RecordView* view, Status* st, bool* freed);
  // Consumes the record Peek() returned and publishes the new tail.
  void Consume(const RecordView& view);
  // A record (maybe a pad) is published at the tail.
  bool HasRecord() const { return LoadSeq(tail_) == tail_; }
  uint64_t tail() const { return tail_; }

 private:
  uint64_t LoadSeq(uint64_t pos) const;

  const uint8_t* ring_ = nullptr;
  uint64_t size_ = 0, mask_ = 0;
  ConsumerLine* consumer_ = nullptr;
  uint64_t tail_ = 0;
};

}  // namespace ferry_shm
