// The receiving side of a connection. progress() polls the `seq` of the
// record at our tail in the peer's ring; a message record becomes one
// FERRY_EV_ARRIVAL whose header and inline segments point straight into
// the ring (no copy), and the record stays in the ring until the host
// answers. place() then moves the other segments into the host's buffers:
// CMA segments with process_vm_readv from the sender's memory, ring
// segments by copying the chunk records that follow. discard() skips them.
// Later arrivals wait until the answer (FERRY_CAP_ORDERED).
//
// Every length, count, mode and offset read from the ring is checked
// against the record's bounds before it is used: a corrupt ring breaks the
// connection with DATA_LOSS, never a crash.
#include "cma.h"
#include "config.h"
#include "connection.h"
#include "context.h"
#include "shared_atomic.h"

#include <cerrno>
#include <cstring>

namespace ferry_shm {
namespace {

// Bytes moved per connection per progress() call, so one huge message
// cannot stall every other connection for long.
constexpr uint64_t kCmaBudget = 16ull << 20;
constexpr uint64_t kCopyBudget = 16ull << 20;

bool HostDevice(int32_t type) {
  return type == 0 || type == FERRY_DEVICE_CPU || type == FERRY_DEVICE_CUDA_HOST;
}

Status Corrupt(const char* fmt, unsigned long long a, unsigned long long b) {
  return Status(FERRY_DATA_LOSS, "shm: corrupt ring: " + Format(fmt, a, b));
}

}  // namespace

bool Conn::StepRx(EventSink* sink, Status* st) {
  bool worked = false;
  for (;;) {
    if (rx_ == Rx::kHeld) return worked;
    if (rx_ == Rx::kPlacing || rx_ == Rx::kSkipping) {
      if (!ContinueMessage(sink, st, &worked)) return worked;
      continue;  // finished: maybe the next arrival
    }
    if (arrivals_stopped_ || sink->full()) return worked;
    RecordView v;
    bool freed = false;
    const bool got = reader_.Peek(&v, st, &freed);
    if (freed) bell_.RingIfAsleep();  // a skipped pad's space
    if (!got) {
      if (st->ok() && peer_gone_) {
        // Everything the peer finished sending has been delivered.
        StopArrivals(sink);
        worked = true;
      }
      return worked;
    }
    if (v.kind != kRecordMsg) {
      *st = Corrupt("a chunk record at byte %llu does not belong to any message (%llu)",
                    reader_.tail(), v.len);
      return worked;
    }
    if (!ParseMessage(v, st)) return worked;
    if (peer_gone_ && msg_has_cma_) {
      // Its bytes are in the memory of a process that is gone or closed.
      StopArrivals(sink);
      return true;
    }
    held_ = v;
    held_id_ = next_msg_id_++;
    rx_ = Rx::kHeld;
    EmitArrival(sink);
    return true;
  }
}

bool Conn::ParseMessage(const RecordView& v, Status* st) {
  const Config& cfg = config();
  MessageRecord r;
  if (!ParseMessageRecord(v, reader_.tail(), cfg.max_segments, cfg.max_header_size,
                          &arrival_segs_, &in_segs_, &r, st)) {
    return false;
  }
  ring_left_ = r.ring_bytes;
  msg_has_cma_ = r.has_cma;
  held_header_ = r.header;
  held_header_len_ = r.header_len;
  return true;
}

void Conn::EmitArrival(EventSink* sink) {
  ferry_event_t ev = EventSink::Make(FERRY_EV_ARRIVAL, FERRY_OK, handle(), nullptr,
                                     user_data_.load(std::memory_order_acquire));
  ev.num_segments = static_cast<uint32_t>(arrival_segs_.size());
  ev.msg_id = held_id_;
  ev.header = held_header_;
  ev.header_len = held_header_len_;
  ev.segments = arrival_segs_.empty() ? nullptr : arrival_segs_.data();
  ev.segment_stride = sizeof(ferry_arrival_segment_t);
  sink->Emit(ev);
}

Status Conn::Place(const ferry_place_args_t* a) {
  if (a == nullptr ||
      a->struct_size < FERRY_STRUCT_SIZE(ferry_place_args_t, dest_stride)) {
    return Error(FERRY_INVALID_ARGUMENT, "shm: place() args are missing or too small");
  }
  void* user_data =
      FERRY_FIELD_PRESENT(a, ferry_place_args_t, user_data) ? a->user_data : nullptr;
  std::lock_guard<ferry_plugin::Mutex> lock(mu_);
  if (closing_) {
    return Error(FERRY_FAILED_PRECONDITION, "shm: place() on a connection being closed");
  }
  if (rx_ != Rx::kHeld || a->msg_id != held_id_) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "shm: no arrival with msg_id %llu is waiting for an answer",
                 (unsigned long long)a->msg_id);
  }
  const uint32_t n = static_cast<uint32_t>(in_segs_.size());
  if (a->num_dests != n) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "shm: place() gives %u destinations for a message of %u segments",
                 a->num_dests, n);
  }
  if (n > 0 && (a->dests == nullptr ||
                a->dest_stride < FERRY_STRUCT_SIZE(ferry_place_dest_t, capacity))) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "shm: place() dests is NULL or dest_stride %llu is too small",
                 (unsigned long long)a->dest_stride);
  }
  for (uint32_t i = 0; i < n; ++i) {
    const ferry_place_dest_t* d =
        FERRY_ELEMENT_AT(const ferry_place_dest_t, a->dests, a->dest_stride, i);
    if (in_segs_[i].mode == kSegInline || d->data == nullptr) continue;
    if (d->capacity < in_segs_[i].length) {
      return Error(FERRY_INVALID_ARGUMENT,
                   "shm: destination %u holds %llu bytes, its segment has %llu", i,
                   (unsigned long long)d->capacity,
                   (unsigned long long)in_segs_[i].length);
    }
    if (FERRY_FIELD_PRESENT(d, ferry_place_dest_t, device) &&
        !HostDevice(d->device.type)) {
      return Error(FERRY_INVALID_ARGUMENT,
                   "shm: destination %u is device memory (type %d); shm places "
                   "into host memory only",
                   i, d->device.type);
    }
  }
  if (!broken_.ok() && !peer_gone_) {
    return Status(broken_.code, "shm: the connection is broken: " + broken_.message);
  }
  cma_left_ = 0;
  ring_seg_ = n;
  for (uint32_t i = 0; i < n; ++i) {
    const ferry_place_dest_t* d =
        FERRY_ELEMENT_AT(const ferry_place_dest_t, a->dests, a->dest_stride, i);
    InSegment& s = in_segs_[i];
    s.dest = s.mode == kSegInline ? nullptr : static_cast<uint8_t*>(d->data);
    if (s.mode == kSegCma && s.dest != nullptr) cma_left_ += s.length;
    if (s.mode == kSegRing && ring_seg_ == n) ring_seg_ = i;
  }
  // The header and inline bytes are no longer needed: free the record.
  // The producer may be waiting for exactly this space (a record behind an
  // early wrap's pad has little room after it: ring.h), so it is told.
  reader_.Consume(held_);
  bell_.RingIfAsleep();
  rx_ = Rx::kPlacing;
  place_user_data_ = user_data;
  msg_status_ = Status();
  ctx_->Kick();
  return Status();
}

Status Conn::Discard(uint64_t msg_id) {
  std::lock_guard<ferry_plugin::Mutex> lock(mu_);
  if (closing_) {
    // close() released what was held: refused like place() after close().
    return Error(FERRY_FAILED_PRECONDITION,
                 "shm: discard() on a connection being closed");
  }
  if (rx_ != Rx::kHeld || msg_id != held_id_) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "shm: no arrival with msg_id %llu is waiting for an answer",
                 (unsigned long long)msg_id);
  }
  const uint32_t n = static_cast<uint32_t>(in_segs_.size());
  ring_seg_ = n;
  for (uint32_t i = 0; i < n; ++i) {
    in_segs_[i].dest = nullptr;
    if (in_segs_[i].mode == kSegRing && ring_seg_ == n) ring_seg_ = i;
  }
  cma_left_ = 0;
  msg_status_ = Status();
  reader_.Consume(held_);
  if (ring_left_ == 0) {
    // The common case (an all-inline message): done here, no event.
    ++msgs_done_;
    StoreRelease(&rx_seg_.control()->consumer.msgs_done, msgs_done_);
    rx_ = Rx::kIdle;
  } else {
    rx_ = Rx::kSkipping;
  }
  bell_.RingIfAsleep();  // the record's space, and msgs_done
  ctx_->Kick();
  return Status();
}

bool Conn::ContinueMessage(EventSink* sink, Status* st, bool* worked) {
  if (cma_left_ > 0 && msg_status_.ok()) {
    ReadCma(kCmaBudget);
    *worked = true;
  }
  uint64_t budget = kCopyBudget;
  bool consumed = false;
  while (ring_left_ > 0 && budget > 0) {
    RecordView v;
    if (!reader_.Peek(&v, st, &consumed)) {
      if (!st->ok()) return false;
      if (!peer_gone_) break;
      // The rest of the message will never come.
      if (msg_status_.ok()) {
        msg_status_ = Status(
            FERRY_PEER_GONE,
            "shm: the peer went away in the middle of a message: " + broken_.message);
      }
      ring_left_ = 0;
      break;
    }
    ChunkBody cb;
    if (v.kind != kRecordChunk || v.len <= sizeof cb) {
      *st = Corrupt("expected a chunk record at byte %llu, found kind %llu",
                    reader_.tail(), v.kind);
      return false;
    }
    std::memcpy(&cb, v.body, sizeof cb);
    const uint64_t len = v.len - sizeof cb;
    InSegment& s = in_segs_[ring_seg_];
    if (cb.segment != ring_seg_ || cb.offset != s.done || len > s.length - s.done) {
      *st = Status(
          FERRY_DATA_LOSS,
          Format("shm: corrupt ring: chunk of %llu bytes for segment %u at "
                 "offset %llu does not continue segment %u (%llu of %llu "
                 "bytes received)",
                 (unsigned long long)len, cb.segment, (unsigned long long)cb.offset,
                 ring_seg_, (unsigned long long)s.done, (unsigned long long)s.length));
      return false;
    }
    if (s.dest != nullptr && msg_status_.ok()) {
      std::memcpy(s.dest + s.done, v.body + sizeof cb, len);
    }
    s.done += len;
    ring_left_ -= len;
    budget -= len < budget ? len : budget;
    if (s.done == s.length) {
      uint32_t next = ring_seg_ + 1;
      while (next < in_segs_.size() && in_segs_[next].mode != kSegRing) ++next;
      ring_seg_ = next;
    }
    reader_.Consume(v);
    consumed = true;
  }
  if (consumed) {
    *worked = true;
    bell_.RingIfAsleep();  // the producer may wait for the space
  }
  if (ring_left_ > 0 || (cma_left_ > 0 && msg_status_.ok())) return false;
  FinishMessage(sink);
  *worked = true;
  return true;
}

void Conn::ReadCma(uint64_t budget) {
  for (uint32_t i = 0; i < in_segs_.size() && budget > 0; ++i) {
    InSegment& s = in_segs_[i];
    if (s.mode != kSegCma || s.dest == nullptr) continue;
    while (s.done < s.length && budget > 0) {
      const uint64_t want = s.length - s.done < budget ? s.length - s.done : budget;
      const int64_t got = CmaRead(peer_.pid, s.dest + s.done, s.address + s.done, want);
      if (got <= 0) {
        const int err = static_cast<int>(-got);
        if (err == ESRCH) {
          msg_status_ = Error(FERRY_PEER_GONE,
                              "shm: the peer process (pid %d) is gone; segment %u "
                              "could not be read",
                              static_cast<int>(peer_.pid), i);
        } else {
          msg_status_ = Error(FERRY_DATA_LOSS,
                              "shm: reading segment %u (%llu bytes at 0x%llx) from "
                              "pid %d failed: %s (the sender's buffer is no longer "
                              "mapped, or the destination is invalid)",
                              i, (unsigned long long)s.length,
                              (unsigned long long)s.address, static_cast<int>(peer_.pid),
                              got == 0 ? "nothing read" : std::strerror(err));
        }
        cma_left_ = 0;
        return;
      }
      s.done += static_cast<uint64_t>(got);
      cma_left_ -= static_cast<uint64_t>(got);
      budget -= static_cast<uint64_t>(got);
    }
  }
  // A buffer is only ours to read while the sender has not cancelled its
  // send: the sender raises `closed` before it reports CANCELLED, so a read
  // that finished before we see the flag read valid bytes. The reads above
  // must complete before the flag is loaded: an acquire load orders only
  // what follows it, so on a weakly ordered CPU (ARM) it takes a fence.
  if (cma_left_ == 0 && msg_status_.ok()) {
    FenceSeqCst();
    if (LoadRelaxed(&rx_seg_.control()->owner.closed) != 0) {
      msg_status_ = Error(FERRY_PEER_GONE,
                          "shm: the peer closed the connection while its buffer was "
                          "being read");
    }
  }
}

void Conn::FinishMessage(EventSink* sink) {
  ++msgs_done_;
  StoreRelease(&rx_seg_.control()->consumer.msgs_done, msgs_done_);
  bell_.RingIfAsleep();
  const bool placing = rx_ == Rx::kPlacing;
  rx_ = Rx::kIdle;
  if (placing) {
    Emit(sink, FERRY_EV_PLACE_DONE, msg_status_.code, place_user_data_,
         msg_status_.message);
  }
  // After an incomplete message the stream cannot continue.
  if (!msg_status_.ok() && peer_gone_) StopArrivals(sink);
}

bool Conn::RxHasWork() {
  switch (rx_) {
    case Rx::kHeld:
      return false;
    case Rx::kIdle:
      return !arrivals_stopped_ && (peer_gone_ || reader_.HasRecord());
    case Rx::kPlacing:
    case Rx::kSkipping:
      return (cma_left_ > 0 && msg_status_.ok()) || ring_left_ == 0 || peer_gone_ ||
             reader_.HasRecord();
  }
  return false;
}

}  // namespace ferry_shm
