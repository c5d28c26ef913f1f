#include "ring.h"

#include "shared_atomic.h"

namespace ferry_shm {

// --- writer ----------------------------------------------------------------

void RingWriter::Init(uint8_t* ring, uint64_t size, ConsumerLine* consumer) {
  ring_ = ring;
  size_ = size;
  mask_ = size - 1;
  consumer_ = consumer;
  head_ = 0;
  tail_cache_ = 0;
  next_wrap_check_ = kHotBytes;
  // Position 0's seq must not read as 0 before the first record.
  StoreRelease(&At(0)->seq, kNoRecord);
}

bool RingWriter::Free(uint64_t need, Status* st) {
  // `need` covers the record plus the next record's header, whose seq is
  // cleared before this one is published.
  if (head_ + need - tail_cache_ <= size_) return true;
  // Acquire: the consumer is done reading what lies before its tail.
  const uint64_t tail = LoadAcquire(&consumer_->tail);
  if (tail < tail_cache_ || tail > head_ || (tail % kRecordAlign) != 0) {
    *st = Error(FERRY_DATA_LOSS,
                "shm: corrupt ring: the peer reported consuming up to byte "
                "%llu, but it had consumed %llu and %llu were written",
                (unsigned long long)tail, (unsigned long long)tail_cache_,
                (unsigned long long)head_);
    return false;
  }
  tail_cache_ = tail;
  return head_ + need - tail_cache_ <= size_;
}

void RingWriter::Publish(uint64_t span, uint32_t len, uint16_t kind) {
  RecordHeader* h = At(head_);
  h->len = len;
  h->kind = kind;
  h->flags = 0;
  // Clear the next record's seq first: stale bytes there (from an earlier
  // lap, maybe payload) must not read as a record at head_ + span.
  StoreRelaxed(&At(head_ + span)->seq, kNoRecord);
  StoreRelease(&h->seq, head_);
  head_ += span;
}

void RingWriter::PadToEnd(uint64_t to_end) {
  Publish(to_end, static_cast<uint32_t>(to_end - sizeof(RecordHeader)), kRecordPad);
}

bool RingWriter::WrapEarly(uint64_t span, uint64_t to_end) {
  // Looked at once per kHotBytes written, so a ring that stays busy costs
  // one read of the consumer's line per kHotBytes, not one per record.
  if (head_ < next_wrap_check_) return false;
  next_wrap_check_ = head_ + kHotBytes;
  if (tail_cache_ != head_) {
    const uint64_t tail = LoadAcquire(&consumer_->tail);
    if (tail != head_)
      return false;  // records in flight (a bad value is Free's to report)
    tail_cache_ = tail;
  }
  // Drained, so Free(to_end + span + kRecordAlign) reduces to this: the
  // record fits in what lies before head_, with the next record's header.
  return to_end + span + kRecordAlign <= size_;
}

uint8_t* RingWriter::Reserve(uint64_t body_len, Status* st) {
  const uint64_t span = RecordSpan(body_len);
  const uint64_t offset = head_ & mask_;
  const uint64_t to_end = size_ - offset;
  if (offset >= kHotBytes && WrapEarly(span, to_end)) {
    PadToEnd(to_end);
    next_wrap_check_ = head_ + kHotBytes;
  } else if (span > to_end) {
    // Pad to the end first; it needs room for itself and for the record.
    if (!Free(to_end + span + kRecordAlign, st)) return nullptr;
    PadToEnd(to_end);
  } else if (!Free(span + kRecordAlign, st)) {
    return nullptr;
  }
  reserved_len_ = body_len;
  return reinterpret_cast<uint8_t*>(At(head_)) + sizeof(RecordHeader);
}

void RingWriter::Commit(uint16_t kind) {
  Publish(RecordSpan(reserved_len_), static_cast<uint32_t>(reserved_len_), kind);
}

bool RingWriter::HasRoom(uint64_t body_len, Status* st) {
  const uint64_t span = RecordSpan(body_len);
  const uint64_t to_end = size_ - (head_ & mask_);
  return Free((span > to_end ? to_end : 0) + span + kRecordAlign, st);
}

// --- reader ----------------------------------------------------------------

void RingReader::Init(const uint8_t* ring, uint64_t size, ConsumerLine* consumer) {
  ring_ = ring;
  size_ = size;
  mask_ = size - 1;
  consumer_ = consumer;
  tail_ = 0;
}

uint64_t RingReader::LoadSeq(uint64_t pos) const {
  const auto* h = reinterpret_cast<const RecordHeader*>(ring_ + (pos & mask_));
  return LoadAcquire(&h->seq);
}

bool RingReader::Peek(RecordView* view, Status* st, bool* freed) {
  for (;;) {
    const uint64_t off = tail_ & mask_;
    const auto* h = reinterpret_cast<const RecordHeader*>(ring_ + off);
    if (LoadAcquire(&h->seq) != tail_) return false;
    // Read each field once: the peer could rewrite them under our feet.
    const uint32_t len = LoadRelaxed(&h->len);
    const uint16_t kind = LoadRelaxed(&h->kind);
    const uint64_t room = size_ - off - sizeof(RecordHeader);
    if (len > room) {
      *st = Error(FERRY_DATA_LOSS,
                  "shm: corrupt ring: record at byte %llu claims %u bytes but "
                  "only %llu remain before the end of the ring",
                  (unsigned long long)tail_, len, (unsigned long long)room);
      return false;
    }
    if (kind == kRecordPad) {
      if (len != room) {
        *st = Error(FERRY_DATA_LOSS,
                    "shm: corrupt ring: pad record at byte %llu does not reach "
                    "the end of the ring (%u of %llu bytes)",
                    (unsigned long long)tail_, len, (unsigned long long)room);
        return false;
      }
      tail_ += size_ - off;
      StoreRelease(&consumer_->tail, tail_);
      *freed = true;
      continue;
    }
    if (kind != kRecordMsg && kind != kRecordChunk) {
      *st = Error(FERRY_DATA_LOSS,
                  "shm: corrupt ring: record at byte %llu has unknown kind %u",
                  (unsigned long long)tail_, (unsigned)kind);
      return false;
    }
    view->kind = kind;
    view->len = len;
    view->body = ring_ + off + sizeof(RecordHeader);
    view->span = RecordSpan(len);
    return true;
  }
}

void RingReader::Consume(const RecordView& view) {
  tail_ += view.span;
  // Release: our reads of the record happen before the writer reuses it.
  StoreRelease(&consumer_->tail, tail_);
}

}  // namespace ferry_shm
