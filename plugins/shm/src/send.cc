// The sending side of a connection: send() validates the whole message
// before touching a byte, then (when the connection is up and nothing is
// queued ahead) writes the message record straight into our ring. Segments
// take one of three paths, chosen per segment:
//   inline  small: copied into the message record, so they arrive with it;
//   CMA     large, when the peer may read our memory: only the address goes
//           in the record, the receiver's place() reads the bytes directly
//           into its buffer, and SEND_DONE waits for the peer's msgs_done;
//   ring    otherwise: streamed as chunk records after the message record,
//           so a 1 GiB tensor needs no 1 GiB staging area.
// SEND_DONE events come from progress(), in posting order.
#include "config.h"
#include "connection.h"
#include "context.h"
#include "shared_atomic.h"

#include <algorithm>
#include <cstring>

namespace ferry_shm {
namespace {

// Back-pressure: sends queued behind a full ring (each may hold a copy of
// its header) before send() says FERRY_UNAVAILABLE.
constexpr size_t kMaxWaitingSends = 16384;

bool HostDevice(int32_t type) {
  return type == 0 || type == FERRY_DEVICE_CPU || type == FERRY_DEVICE_CUDA_HOST;
}

// Which segments travel inline: each of at most inline_max bytes, in order,
// while the message's inline bytes stay within inline_budget. The one rule
// for send()'s fast path and for WriteMessage.
struct InlineBudget {
  uint64_t total = 0;   // inline bytes taken
  uint64_t padded = 0;  // the same, as laid out in the record
  bool Take(const Config& cfg, uint64_t length) {
    if (length > cfg.inline_max || total + length > cfg.inline_budget) return false;
    total += length;
    padded += AlignUp(length, 8);
    return true;
  }
};

// Segment `i` of the host's send() arguments (a missing device is the CPU).
OutSegment HostSegment(const ferry_send_args_t* a, uint32_t i, uint32_t mode) {
  const ferry_segment_t* s =
      FERRY_ELEMENT_AT(const ferry_segment_t, a->segments, a->segment_stride, i);
  OutSegment o;
  o.data = static_cast<const uint8_t*>(s->data);
  o.length = s->length;
  o.device = FERRY_FIELD_PRESENT(s, ferry_segment_t, device)
                 ? s->device
                 : ferry_device_t{FERRY_DEVICE_CPU, 0};
  o.mode = mode;
  return o;
}

// Bytes of a message record's body (shm_layout.h).
uint64_t MessageBodySize(uint32_t num_segments, uint32_t num_cma, uint64_t header_len,
                         uint64_t inline_padded) {
  return sizeof(MsgBody) + uint64_t{num_segments} * sizeof(SegmentDesc) +
         uint64_t{num_cma} * 8 + AlignUp(header_len, 8) + inline_padded;
}

// Writes a message record's body at `p`: segment `i` is segment_at(i), an
// OutSegment with its mode chosen.
template <typename SegmentAt>
void EncodeMessageBody(uint8_t* p, const uint8_t* header, uint64_t header_len, uint32_t n,
                       uint32_t num_cma, SegmentAt segment_at) {
  const MsgBody mb{static_cast<uint32_t>(header_len), static_cast<uint16_t>(n),
                   static_cast<uint16_t>(num_cma)};
  std::memcpy(p, &mb, sizeof mb);
  uint8_t* desc = p + sizeof mb;
  uint8_t* cma = desc + uint64_t{n} * sizeof(SegmentDesc);
  uint8_t* q = cma + uint64_t{num_cma} * 8;
  if (header_len > 0) std::memcpy(q, header, header_len);
  q += AlignUp(header_len, 8);
  for (uint32_t i = 0; i < n; ++i) {
    const OutSegment s = segment_at(i);
    SegmentDesc d;
    d.length_mode = s.length | (uint64_t{s.mode} << kSegModeShift);
    d.device_type = s.device.type;
    d.device_id = s.device.id;
    std::memcpy(desc + uint64_t{i} * sizeof d, &d, sizeof d);
    if (s.mode == kSegCma) {
      const uint64_t addr = reinterpret_cast<uintptr_t>(s.data);
      std::memcpy(cma, &addr, 8);
      cma += 8;
    } else if (s.mode == kSegInline) {
      if (s.length > 0) std::memcpy(q, s.data, s.length);
      q += AlignUp(s.length, 8);
    }
  }
}

}  // namespace

Status Conn::Send(const ferry_send_args_t* a) {
  const Config& cfg = config();
  if (a == nullptr ||
      a->struct_size < FERRY_STRUCT_SIZE(ferry_send_args_t, segment_stride)) {
    return Error(FERRY_INVALID_ARGUMENT, "shm: send() args are missing or too small");
  }
  if (a->header_len > cfg.max_header_size) {
    return Error(FERRY_RESOURCE_EXHAUSTED,
                 "shm: a %llu-byte header exceeds max_header_size (%u bytes)",
                 (unsigned long long)a->header_len, cfg.max_header_size);
  }
  if (a->header_len > 0 && a->header == nullptr) {
    return Error(FERRY_INVALID_ARGUMENT, "shm: header is NULL but header_len is %llu",
                 (unsigned long long)a->header_len);
  }
  if (a->num_segments > cfg.max_segments) {
    return Error(FERRY_RESOURCE_EXHAUSTED, "shm: %u segments exceed max_segments (%u)",
                 a->num_segments, cfg.max_segments);
  }
  if (a->num_segments > 0 &&
      (a->segments == nullptr ||
       a->segment_stride < FERRY_STRUCT_SIZE(ferry_segment_t, length))) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "shm: %u segments but segments is NULL or segment_stride %llu is "
                 "too small",
                 a->num_segments, (unsigned long long)a->segment_stride);
  }
  // One pass over the segments: the limits, each pointer and device (no
  // byte is read before send() has accepted the message), and whether they
  // all fit inline, which allows the fast path below.
  uint64_t total = a->header_len;
  InlineBudget inline_budget;
  bool all_inline = true;
  for (uint32_t i = 0; i < a->num_segments; ++i) {
    const ferry_segment_t* s =
        FERRY_ELEMENT_AT(const ferry_segment_t, a->segments, a->segment_stride, i);
    if (s->length > cfg.max_message_size || total > cfg.max_message_size - s->length) {
      return Error(FERRY_RESOURCE_EXHAUSTED,
                   "shm: the message exceeds max_message_size (%llu bytes)",
                   (unsigned long long)cfg.max_message_size);
    }
    total += s->length;
    if (s->length > 0 && s->data == nullptr) {
      return Error(FERRY_INVALID_ARGUMENT, "shm: segment %u has %llu bytes at NULL", i,
                   (unsigned long long)s->length);
    }
    const int32_t dev =
        FERRY_FIELD_PRESENT(s, ferry_segment_t, device) ? s->device.type : 0;
    if (!HostDevice(dev)) {
      return Error(FERRY_INVALID_ARGUMENT,
                   "shm: segment %u is in device memory (DLPack device type %d); "
                   "shm moves host memory only (route it over cuda_ipc)",
                   i, dev);
    }
    all_inline = all_inline && inline_budget.Take(cfg, s->length);
  }
  void* user_data =
      FERRY_FIELD_PRESENT(a, ferry_send_args_t, user_data) ? a->user_data : nullptr;

  std::lock_guard<ferry_plugin::Mutex> lock(mu_);
  if (closing_ || state_ == State::kFailed || !broken_.ok()) return RefuseIfUnusable();
  if (all_inline && ops_.empty() && state_ == State::kEstablished && tx_error_.ok() &&
      WriteInlineMessage(a, inline_budget.padded)) {
    written_sends_.push_back(user_data);
    bell_.RingIfAsleep();
    ctx_->Kick();
    return Status();
  }
  if (ops_.size() - next_write_ >= kMaxWaitingSends) {
    return Error(FERRY_UNAVAILABLE,
                 "shm: %zu sends are already waiting for ring space: call progress() "
                 "and post again",
                 ops_.size() - next_write_);
  }
  SendOp* op = NewOp();
  op->user_data = user_data;
  op->header = static_cast<const uint8_t*>(a->header);
  op->header_len = a->header_len;
  op->segs.resize(a->num_segments);
  for (uint32_t i = 0; i < a->num_segments; ++i) op->segs[i] = HostSegment(a, i, 0);
  ops_.push_back(op);
  if (state_ == State::kEstablished && next_write_ == ops_.size() - 1) {
    PumpTx(&tx_error_);
  }
  if (!op->record_written) {
    // It waits in the queue: keep our own copy of the header.
    op->header_copy.assign(op->header, op->header + op->header_len);
    op->header = op->header_copy.data();
  }
  ctx_->Kick();
  return Status();
}

// WriteMessage for a message whose segments all go inline, straight from
// the host's arguments (no SendOp).
bool Conn::WriteInlineMessage(const ferry_send_args_t* a, uint64_t inline_padded) {
  const uint32_t n = a->num_segments;
  uint8_t* p =
      writer_.Reserve(MessageBodySize(n, 0, a->header_len, inline_padded), &tx_error_);
  if (p == nullptr) return false;  // no room (or a corrupt ring): the slow path
  EncodeMessageBody(p, static_cast<const uint8_t*>(a->header), a->header_len, n, 0,
                    [a](uint32_t i) { return HostSegment(a, i, kSegInline); });
  writer_.Commit(kRecordMsg);
  ++msgs_written_;
  return true;
}

bool Conn::PumpTx(Status* st) {
  bool wrote = false;
  while (next_write_ < ops_.size()) {
    SendOp* op = ops_[next_write_];
    if (!op->record_written) {
      if (!WriteMessage(op, st)) break;
      wrote = true;
    }
    bool stalled = false;
    while (!op->streamed) {
      if (!WriteChunk(op, st)) {
        stalled = true;
        break;
      }
      wrote = true;
    }
    if (stalled) break;
    ++next_write_;
  }
  if (wrote) bell_.RingIfAsleep();
  return wrote;
}

bool Conn::WriteMessage(SendOp* op, Status* st) {
  const Config& cfg = config();
  const uint32_t n = static_cast<uint32_t>(op->segs.size());
  InlineBudget inline_budget;
  uint32_t num_cma = 0;
  int first_ring = -1;
  for (uint32_t i = 0; i < n; ++i) {
    OutSegment& s = op->segs[i];
    if (inline_budget.Take(cfg, s.length)) {
      s.mode = kSegInline;
    } else if (cma_send_ && s.length >= cfg.cma_min &&
               (cfg.cma_max == 0 || s.length <= cfg.cma_max)) {
      s.mode = kSegCma;
      ++num_cma;
    } else {
      s.mode = kSegRing;
      if (first_ring < 0) first_ring = static_cast<int>(i);
    }
  }
  const uint64_t body = MessageBodySize(n, num_cma, op->header_len, inline_budget.padded);
  uint8_t* p = writer_.Reserve(body, st);
  if (p == nullptr) {
    blocked_len_ = body;
    return false;
  }
  EncodeMessageBody(p, op->header, op->header_len, n, num_cma,
                    [op](uint32_t i) { return op->segs[i]; });
  writer_.Commit(kRecordMsg);
  op->record_written = true;
  op->msg_index = msgs_written_++;
  op->needs_ack = num_cma > 0;
  op->streamed = first_ring < 0;
  op->stream_seg = first_ring < 0 ? 0 : static_cast<uint32_t>(first_ring);
  op->stream_off = 0;
  return true;
}

bool Conn::WriteChunk(SendOp* op, Status* st) {
  const OutSegment& s = op->segs[op->stream_seg];
  const uint64_t n = std::min(s.length - op->stream_off, config().chunk_size);
  uint8_t* p = writer_.Reserve(sizeof(ChunkBody) + n, st);
  if (p == nullptr) {
    blocked_len_ = sizeof(ChunkBody) + n;
    return false;
  }
  ChunkBody cb{op->stream_seg, 0, op->stream_off};
  std::memcpy(p, &cb, sizeof cb);
  std::memcpy(p + sizeof cb, s.data + op->stream_off, n);
  writer_.Commit(kRecordChunk);
  op->stream_off += n;
  if (op->stream_off == s.length) {
    op->stream_off = 0;
    uint32_t next = op->stream_seg + 1;
    while (next < op->segs.size() && op->segs[next].mode != kSegRing) ++next;
    op->stream_seg = next;
    op->streamed = next >= op->segs.size();
  }
  return true;
}

bool Conn::AckedBeyond(uint64_t msg_index, Status* st) {
  if (msgs_acked_ > msg_index) return true;
  const uint64_t v = LoadAcquire(&tx_seg_.control()->consumer.msgs_done);
  if (v < msgs_acked_ || v > msgs_written_) {
    *st = Error(FERRY_DATA_LOSS,
                "shm: corrupt ring: the peer reported %llu messages received, "
                "but it had reported %llu and %llu were sent",
                (unsigned long long)v, (unsigned long long)msgs_acked_,
                (unsigned long long)msgs_written_);
    return false;
  }
  msgs_acked_ = v;
  return v > msg_index;
}

bool Conn::ReapSends(EventSink* sink, Status* st) {
  bool any = !written_sends_.empty();
  while (!written_sends_.empty()) {
    Emit(sink, FERRY_EV_SEND_DONE, FERRY_OK, written_sends_.pop_front());
  }
  while (!ops_.empty()) {
    SendOp* op = ops_.front();
    if (!op->record_written || !op->streamed) break;
    if (op->needs_ack && !AckedBeyond(op->msg_index, st)) break;
    Emit(sink, FERRY_EV_SEND_DONE, FERRY_OK, op->user_data);
    ops_.pop_front();
    --next_write_;
    RecycleOp(op);
    any = true;
  }
  return any;
}

void Conn::FailSends(EventSink* sink, ferry_status_t code, const std::string& why) {
  // Written, but the peer may not have read them: they fail like the rest.
  while (!written_sends_.empty()) {
    Emit(sink, FERRY_EV_SEND_DONE, code, written_sends_.pop_front(), why);
  }
  while (!ops_.empty()) {
    SendOp* op = ops_.pop_front();
    Emit(sink, FERRY_EV_SEND_DONE, code, op->user_data, why);
    RecycleOp(op);
  }
  next_write_ = 0;
}

bool Conn::TxHasWork() {
  if (!tx_error_.ok() || !written_sends_.empty()) return true;
  if (ops_.empty() || !broken_.ok()) return false;
  Status st;
  SendOp* op = ops_.front();
  if (op->record_written && op->streamed &&
      (!op->needs_ack || AckedBeyond(op->msg_index, &st))) {
    return true;
  }
  if (next_write_ < ops_.size() && writer_.HasRoom(blocked_len_, &st)) return true;
  return !st.ok();
}

SendOp* Conn::NewOp() {
  if (free_ops_.empty()) return new SendOp();
  SendOp* op = free_ops_.back();
  free_ops_.pop_back();
  return op;
}

void Conn::RecycleOp(SendOp* op) {
  op->Reset();
  free_ops_.push_back(op);
}

}  // namespace ferry_shm
