// Large segments without RMA (a provider without FI_RMA, or rma=off): the
// message path in chunks.
//
//   sender                                   receiver
//   MSG{seq, op, sizes...}             --->  ARRIVAL
//                                            place(dest...): remember the
//                                              destinations under a stream id
//                                    <---  CTS{op, wanted segments, stream}
//   DATA{stream, segment, offset, bytes}...-> copied into the placed buffer
//   SEND_DONE once the last chunk is        all bytes here: PLACE_DONE
//     copied into a bounce buffer
//
// Nothing streams before the receiver has placed the message, so a receiver
// holding an arrival is never flooded; chunks go through the pre-posted
// receive buffers, which are never left unposted for long. discard() (or
// no wanted segment) answers with an empty CTS.
#include "context.h"

#include <algorithm>
#include <cstring>

namespace ferry_fabric {

Status Context::StartStream(Conn* c, RxMsg* m, const ferry_place_args_t& a,
                            Placement* p) {
  p->stream = true;
  p->id = placements_.Insert(p);
  p->dests.resize(m->segs.size());
  uint64_t mask = 0;
  for (size_t i = 0; i < m->segs.size(); ++i) {
    if (m->bulk[i].mode != wire::kStream) continue;
    const auto* d = FERRY_ELEMENT_AT(const ferry_place_dest_t, a.dests, a.dest_stride, i);
    if (d->data == nullptr || m->segs[i].length == 0) continue;
    mask |= uint64_t{1} << i;
    p->dests[i] = Placement::Dest{static_cast<char*>(d->data), m->segs[i].length};
    p->bytes_expected += m->segs[i].length;
  }
  p->want_mask = mask;
  SendCts(c, m->sender_op, mask, mask != 0 ? p->id : 0);
  MaybeFinishPlacement(p);
  return Status();
}

void Context::SendCts(Conn* c, uint64_t op_id, uint64_t mask, uint64_t stream_id) {
  wire::Cts f{};
  f.head = wire::MakeHead(wire::kCts, c->remote_id);
  f.op_id = op_id;
  f.want_mask = mask;
  f.stream_id = stream_id;
  SendControl(c->peer, c->id, &f, sizeof f);
}

void Context::OnCts(const char* frame, size_t len) {
  wire::Cts f;
  if (!wire::Read(frame, len, &f)) return;
  Conn* c = conns_.Find(f.head.dst);
  SendOp* op = send_ops_.Find(f.op_id);
  if (c == nullptr || op == nullptr || op->conn != c ||
      op->state != SendOp::State::kAwaitCts) {
    return;
  }
  if (f.want_mask == 0) {
    CompleteSendOp(op, FERRY_OK, "");  // the receiver dropped it
    return;
  }
  op->state = SendOp::State::kStreaming;
  op->want_mask = f.want_mask;
  op->stream_id = f.stream_id;
  op->stream_seg = 0;
  op->stream_off = 0;
  streaming_.push_back(op->id);
  PumpStreams();
}

void Context::PumpStreams() {
  // Round robin over streaming sends, a bounded number of chunks each, so
  // one large message does not starve the others.
  constexpr int kChunksPerTurn = 16;
  size_t turns = streaming_.size();
  while (turns-- > 0 && !streaming_.empty()) {
    const uint64_t id = streaming_.front();
    streaming_.pop_front();
    SendOp* op = send_ops_.Find(id);
    if (op == nullptr || op->state != SendOp::State::kStreaming) continue;
    Conn* c = op->conn;
    if (!c->Open()) continue;  // failed or cancelled by whoever changed it
    const uint64_t chunk_max =
        std::min(eager_size_, c->peer_limits.eager_size) - sizeof(wire::Data);
    bool blocked = false;
    for (int chunks = 0; chunks < kChunksPerTurn;) {
      if (op->stream_seg >= op->segs.size()) break;
      const SegRef& s = op->segs[op->stream_seg];
      const bool wanted = op->stream_seg < 64 &&
                          (op->want_mask >> op->stream_seg & 1) != 0 &&
                          s.mode == wire::kStream;
      if (!wanted || op->stream_off >= s.length) {
        ++op->stream_seg;
        op->stream_off = 0;
        continue;
      }
      TxBuf* b = GetTxBuf(/*control=*/false);
      if (b == nullptr) {
        blocked = true;
        break;
      }
      const uint64_t n = std::min(chunk_max, s.length - op->stream_off);
      wire::Data d{};
      d.head = wire::MakeHead(wire::kData, c->remote_id);
      d.stream_id = op->stream_id;
      d.offset = op->stream_off;
      d.segment = op->stream_seg;
      d.length = static_cast<uint32_t>(n);
      std::memcpy(b->data, &d, sizeof d);
      std::memcpy(b->data + sizeof d, s.data + op->stream_off, n);
      b->length = static_cast<uint32_t>(sizeof d + n);
      b->frame_type = wire::kData;
      b->conn_id = c->id;
      b->peer = c->peer;
      op->stream_off += n;
      ++chunks;
      if (!PostFrame(b)) {
        blocked = true;  // the connection broke and failed `op`
        break;
      }
    }
    op = send_ops_.Find(id);
    if (op == nullptr) {
      if (blocked) break;
      continue;
    }
    if (op->stream_seg >= op->segs.size()) {
      // Every chunk is a copy in a bounce buffer: the host's memory is free.
      CompleteSendOp(op, FERRY_OK, "");
    } else {
      streaming_.push_back(id);
    }
    if (blocked) break;
  }
}

void Context::OnData(const char* frame, size_t len) {
  wire::Data d;
  if (!wire::Read(frame, len, &d)) return;
  Conn* c = conns_.Find(d.head.dst);
  Placement* p = placements_.Find(d.stream_id);
  if (c == nullptr || p == nullptr || p->conn != c || p->cancelled ||
      p->status != FERRY_OK) {
    return;  // closed or failed meanwhile: dropped
  }
  if (d.segment >= p->dests.size() || (p->want_mask >> d.segment & 1) == 0 ||
      len - sizeof d < d.length || d.offset > p->dests[d.segment].length ||
      d.length > p->dests[d.segment].length - d.offset) {
    p->Fail(FERRY_DATA_LOSS, "fabric: malformed DATA frame from the peer");
    MaybeFinishPlacement(p);
    return;
  }
  std::memcpy(p->dests[d.segment].data + d.offset, frame + sizeof d, d.length);
  p->bytes_received += d.length;
  MaybeFinishPlacement(p);
}

}  // namespace ferry_fabric
