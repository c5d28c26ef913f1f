// send(): validation (sizes before data: an oversized message is refused
// before a byte of it is touched), which segments travel inline, the MSG
// encoding, and the eager fast path.
//
// Why eager sends complete before libfabric's completion: the frame is a
// copy in the plugin's own registered bounce buffer (or an fi_inject), so
// the host's buffers are free the moment it was built; SEND_DONE is queued
// for the next progress() (never inline). The fast path allocates nothing:
// the segment list is a reused vector, the bounce buffer comes from a pool.
#include "context.h"

#include "fi_error.h"

#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstring>

namespace ferry_fabric {
namespace {

// The argument checks both send paths make, written once: ValidateSend
// words the error, TrySendSmall declines and leaves that to it.
bool HeaderMissing(const ferry_send_args_t& a) {
  return a.header_len > 0 && a.header == nullptr;
}
bool SegmentArrayMissing(const ferry_send_args_t& a) {
  return a.num_segments > 0 &&
         (a.segments == nullptr ||
          a.segment_stride < FERRY_STRUCT_SIZE(ferry_segment_t, length));
}
bool DataMissing(const ferry_segment_t* s) {
  return s->length > 0 && s->data == nullptr;
}
bool ForeignRegistration(const ferry_segment_t* s) {
  return FERRY_FIELD_PRESENT(s, ferry_segment_t, mr) && s->mr != nullptr &&
         reinterpret_cast<const HostMr*>(s->mr)->magic != HostMr::kMagic;
}

}  // namespace

// --- send() ---------------------------------------------------------------------

Status Context::ValidateSend(Conn* c, const ferry_send_args_t& a, uint64_t* total) const {
  if (HeaderMissing(a)) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "fabric: send() has header_len %llu and a NULL header",
                 static_cast<unsigned long long>(a.header_len));
  }
  if (a.header_len > max_header_) {
    return Error(FERRY_RESOURCE_EXHAUSTED,
                 "fabric: send() header of %llu bytes exceeds max_header_size %u",
                 static_cast<unsigned long long>(a.header_len), max_header_);
  }
  if (a.num_segments > config_.max_segments) {
    return Error(FERRY_RESOURCE_EXHAUSTED,
                 "fabric: send() with %u segments exceeds max_segments %u",
                 a.num_segments, config_.max_segments);
  }
  if (SegmentArrayMissing(a)) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "fabric: send() needs a segment array with segment_stride >= %zu",
                 FERRY_STRUCT_SIZE(ferry_segment_t, length));
  }
  if (c->state == Conn::State::kOpen) {
    if (a.header_len > c->peer_limits.max_header ||
        a.num_segments > c->peer_limits.max_segments) {
      return Error(FERRY_RESOURCE_EXHAUSTED,
                   "fabric: the peer accepts headers up to %u bytes and %u "
                   "segments (this message: %llu bytes, %u segments)",
                   c->peer_limits.max_header, c->peer_limits.max_segments,
                   static_cast<unsigned long long>(a.header_len), a.num_segments);
    }
  }
  // Sizes first, data never: an oversized message is refused before a
  // single byte of it is touched.
  const uint64_t max = config_.max_message_size;
  uint64_t sum = a.header_len;
  for (uint32_t i = 0; i < a.num_segments; ++i) {
    const auto* s =
        FERRY_ELEMENT_AT(const ferry_segment_t, a.segments, a.segment_stride, i);
    if (s->length > max || sum > max - s->length) {
      return Error(FERRY_RESOURCE_EXHAUSTED,
                   "fabric: message of more than %llu bytes (header + "
                   "segments) exceeds max_message_size %llu",
                   static_cast<unsigned long long>(max),
                   static_cast<unsigned long long>(max));
    }
    sum += s->length;
    if (DataMissing(s)) {
      return Error(FERRY_INVALID_ARGUMENT,
                   "fabric: segment %u has %llu bytes and a NULL data pointer", i,
                   static_cast<unsigned long long>(s->length));
    }
    if (FERRY_FIELD_PRESENT(s, ferry_segment_t, device) && !IsHostMemory(s->device) &&
        !(CudaMemory() && rma_)) {
      return Error(FERRY_INVALID_ARGUMENT,
                   "fabric: segment %u is in device memory (type %d), which "
                   "provider %s cannot move here (needs FI_HMEM, FI_RMA and a "
                   "libfabric that registers CUDA memory: see ferry info)",
                   i, s->device.type, provider_.c_str());
    }
    if (ForeignRegistration(s)) {
      return Error(FERRY_INVALID_ARGUMENT,
                   "fabric: segment %u carries a registration handle that is "
                   "not one of this plugin's",
                   i);
    }
  }
  *total = sum;
  return Status();
}

void Context::SetPeerLimits(Conn* c, const wire::Limits& limits) {
  c->peer_limits = limits;
  Conn::SmallSends& s = c->small;
  s.frame =
      inject_size_ == 0
          ? 0
          : std::min<uint64_t>(std::min<uint64_t>(inject_size_, config_.max_message_size),
                               std::min(eager_size_, limits.eager_size));
  s.inline_max = std::min(max_inline_, limits.max_inline);
  s.max_header = std::min(max_header_, limits.max_header);
  s.max_segments = std::min(config_.max_segments, limits.max_segments);
}

uint8_t Context::BulkMode(const Conn* c) const {
  const bool peer_rma =
      c->state != Conn::State::kOpen || (c->peer_limits.flags & wire::kLimitRma) != 0;
  return rma_ && peer_rma ? wire::kRma : wire::kStream;
}

bool Context::Classify(const Conn* c, std::vector<SegRef>* segs,
                       size_t header_len) const {
  const bool open = c->state == Conn::State::kOpen;
  const uint64_t eager =
      open ? std::min(eager_size_, c->peer_limits.eager_size) : eager_size_;
  const uint64_t inline_max =
      open ? std::min(max_inline_, c->peer_limits.max_inline) : max_inline_;
  // Room left for inline bytes, with every segment's table entry and a
  // possible RMA descriptor already counted.
  const uint64_t fixed =
      sizeof(wire::Msg) +
      segs->size() * (sizeof(wire::SegEntry) + sizeof(wire::RemoteEntry)) + header_len;
  uint64_t budget = eager > fixed ? eager - fixed : 0;
  const uint8_t bulk = BulkMode(c);
  bool all_inline = true;
  for (SegRef& s : *segs) {
    if (IsHostMemory(s.device) && s.length <= inline_max && s.length <= budget) {
      s.mode = wire::kInline;
      budget -= s.length;
    } else {
      s.mode = bulk;
      all_inline = false;
    }
  }
  return all_inline;
}

size_t Context::FrameSize(const std::vector<SegRef>& segs, size_t header_len,
                          size_t num_remote) const {
  size_t n = sizeof(wire::Msg) + segs.size() * sizeof(wire::SegEntry) +
             num_remote * sizeof(wire::RemoteEntry) + header_len;
  for (const SegRef& s : segs) {
    if (s.mode == wire::kInline) n += s.length;
  }
  return n;
}

void Context::EncodeMsg(Conn* c, char* out, uint64_t op_id, const char* header,
                        size_t header_len, const std::vector<SegRef>& segs,
                        const std::vector<wire::RemoteEntry>& remote) {
  const wire::Msg m =
      wire::MakeMsg(c->remote_id, c->next_seq, op_id, static_cast<uint32_t>(header_len),
                    static_cast<uint16_t>(segs.size()));
  char* p = out;
  std::memcpy(p, &m, sizeof m);
  p += sizeof m;
  for (const SegRef& s : segs) {
    const wire::SegEntry e = wire::MakeSegEntry(
        s.length, s.device.type, static_cast<uint16_t>(s.device.id), s.mode);
    std::memcpy(p, &e, sizeof e);
    p += sizeof e;
  }
  if (!remote.empty()) {
    std::memcpy(p, remote.data(), remote.size() * sizeof(wire::RemoteEntry));
    p += remote.size() * sizeof(wire::RemoteEntry);
  }
  if (header_len > 0) {
    std::memcpy(p, header, header_len);
    p += header_len;
  }
  for (const SegRef& s : segs) {
    if (s.mode == wire::kInline && s.length > 0) {
      std::memcpy(p, s.data, s.length);
      p += s.length;
    }
  }
}

bool Context::TrySendEagerNow(Conn* c, const ferry_send_args_t& a,
                              const std::vector<SegRef>& segs) {
  if (c->peer->Unreachable()) return false;
  const char* header = static_cast<const char*>(a.header);
  const size_t size = FrameSize(segs, a.header_len, 0);
  if (size <= inject_size_) {
    char* buf = inject_scratch_.data();
    EncodeMsg(c, buf, 0, header, a.header_len, segs, {});
    if (fi_inject(endpoint_->ep(), buf, size, c->peer->addr) == 0) {
      ++c->next_seq;
      return true;
    }
    // -FI_EAGAIN (or worse): take the queued path, which reports errors.
  }
  TxBuf* b = GetTxBuf(/*control=*/false);
  if (b == nullptr) return false;
  EncodeMsg(c, b->data, 0, header, a.header_len, segs, {});
  b->length = static_cast<uint32_t>(size);
  b->frame_type = wire::kMsg;
  b->conn_id = c->id;
  b->peer = c->peer;
  ssize_t rc =
      fi_send(endpoint_->ep(), b->data, size, b->desc, c->peer->addr, AsContext(b));
  if (rc == 0 || rc == -FI_EAGAIN) {
    // Sequence number taken either way: a frame that met a full queue is
    // ours to post again and still in order.
    ++c->next_seq;
    if (rc == -FI_EAGAIN) QueueResend(b);
    return true;
  }
  tx_pool_.Put(b);
  return false;
}

// The latency path: a message that travels whole in one frame of at most
// inject_size, on an open connection with nothing queued ahead. One pass
// over the host's segments checks each one and writes its table entry and
// bytes straight into the inject buffer; the general path below validates
// everything (ValidateSend), builds a SegRef list, classifies it and
// encodes it. This path sends only what the general path would accept and
// send the same way, and it checks only what it needs to prove that: the
// frame fits both sides' limits and max_message_size (so every size check
// of ValidateSend holds), and every segment is host memory with its data
// there and, if it has one, a registration of this plugin. For anything
// else, valid or not, it returns false with nothing sent and nothing
// changed, and the general path answers (with ValidateSend's error when
// there is one). A small message is thereby checked once, in the pass that
// encodes it, rather than in a separate ValidateSend pass first: a visible
// share of the little work a 64-byte message costs this plugin.
bool Context::TrySendSmall(Conn* c, const ferry_send_args_t& a) {
  const Conn::SmallSends& small = c->small;
  if (!c->Open() || c->peer_closed || !c->txq.empty() || small.frame == 0) return false;
  const uint32_t n = a.num_segments;
  const uint64_t limit = small.frame;
  const uint64_t inline_max = small.inline_max;
  if (a.header_len > small.max_header || n > small.max_segments || HeaderMissing(a) ||
      SegmentArrayMissing(a)) {
    return false;
  }
  const uint64_t fixed =
      sizeof(wire::Msg) + uint64_t{n} * sizeof(wire::SegEntry) + a.header_len;
  if (fixed > limit) return false;
  char* const out = inject_scratch_.data();
  char* entry = out + sizeof(wire::Msg);
  char* data = out + fixed;
  uint64_t room = limit - fixed;
  for (uint32_t i = 0; i < n; ++i) {
    const auto* s =
        FERRY_ELEMENT_AT(const ferry_segment_t, a.segments, a.segment_stride, i);
    ferry_device_t device{FERRY_DEVICE_CPU, 0};
    if (FERRY_FIELD_PRESENT(s, ferry_segment_t, device)) device = s->device;
    if (s->length > room || s->length > inline_max || !IsHostMemory(device) ||
        DataMissing(s) || ForeignRegistration(s)) {
      return false;
    }
    const wire::SegEntry e = wire::MakeSegEntry(
        s->length, device.type, static_cast<uint16_t>(device.id), wire::kInline);
    std::memcpy(entry, &e, sizeof e);
    entry += sizeof e;
    if (s->length > 0) std::memcpy(data, s->data, s->length);
    data += s->length;
    room -= s->length;
  }
  if (c->peer->Unreachable()) return false;
  const wire::Msg m =
      wire::MakeMsg(c->remote_id, c->next_seq, /*op_id=*/0,
                    static_cast<uint32_t>(a.header_len), static_cast<uint16_t>(n));
  std::memcpy(out, &m, sizeof m);
  if (a.header_len > 0) std::memcpy(entry, a.header, a.header_len);
  const size_t size = static_cast<size_t>(data - out);
  if (fi_inject(endpoint_->ep(), out, size, c->peer->addr) != 0) return false;
  ++c->next_seq;
  return true;
}

// Returns a bare code and fills *error only on failure: a successful send
// builds no Status (entry.cc, GuardedCode).
ferry_status_t Context::Send(Conn* c, const ferry_send_args_t& a, Status* error) {
  // The eager fast path first: it declines on any connection that is not
  // open (closed, broken, or closed by the peer), and the checks below word
  // why.
  if (TrySendSmall(c, a)) {
    Emit(FERRY_EV_SEND_DONE, c, a.user_data);
    return FERRY_OK;
  }
  if (c->close_called) {
    return Report(error, Error(FERRY_FAILED_PRECONDITION,
                               "fabric: send() on a connection the host has closed"));
  }
  if (c->state == Conn::State::kBroken || c->peer_closed) {
    // The break's status, except a failed connect's UNAVAILABLE: from send()
    // that means "back-pressure, retry", and retrying cannot help.
    ferry_status_t code = c->broken_status == FERRY_OK ? FERRY_PEER_GONE
                          : c->broken_status == FERRY_UNAVAILABLE
                              ? FERRY_FAILED_PRECONDITION
                              : c->broken_status;
    return Report(error, Status(code, "fabric: send() on a broken connection: " +
                                          (c->broken_message.empty()
                                               ? std::string("the peer closed it")
                                               : c->broken_message)));
  }
  uint64_t total = 0;
  Status st = ValidateSend(c, a, &total);
  if (!st.ok()) return Report(error, std::move(st));
  if (c->txq.size() >= config_.max_pending_sends) {
    return Report(error, Error(FERRY_UNAVAILABLE,
                               "fabric: %zu sends are already queued on this connection "
                               "(max_pending_sends); call progress() and send again",
                               c->txq.size()));
  }
  std::vector<SegRef>& segs = seg_scratch_;
  segs.clear();
  for (uint32_t i = 0; i < a.num_segments; ++i) {
    const auto* s =
        FERRY_ELEMENT_AT(const ferry_segment_t, a.segments, a.segment_stride, i);
    SegRef r;
    r.data = static_cast<const char*>(s->data);
    r.length = s->length;
    if (FERRY_FIELD_PRESENT(s, ferry_segment_t, device)) r.device = s->device;
    if (FERRY_FIELD_PRESENT(s, ferry_segment_t, mr)) {
      r.mr = reinterpret_cast<HostMr*>(s->mr);
    }
    segs.push_back(r);
  }
  const bool all_inline = Classify(c, &segs, a.header_len);
  if (all_inline && c->Open() && c->txq.empty() && TrySendEagerNow(c, a, segs)) {
    Emit(FERRY_EV_SEND_DONE, c, a.user_data);
    return FERRY_OK;
  }
  SendOp* op = NewSendOp();
  op->conn = c;
  op->user_data = a.user_data;
  const char* h = static_cast<const char*>(a.header);
  op->header.assign(h, h + a.header_len);
  op->segs = segs;
  c->txq.push_back(op);
  if (c->Open()) PumpTx(c);
  return FERRY_OK;
}

}  // namespace ferry_fabric
