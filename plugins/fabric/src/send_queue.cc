// The per-connection send queue: sends that could not go out inside send()
// (before CONNECTED, behind earlier ones, no bounce buffer free, large
// segments to register) wait here in send() order, are posted by PumpTx as
// resources allow, and, when they have large segments, wait again for the
// peer (FIN after its RMA read, CTS before streaming) in `waiting`.
#include "context.h"

#include "fi_error.h"

#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstring>

namespace ferry_fabric {

// --- the send queue ---------------------------------------------------------------

SendOp* Context::NewSendOp() {
  SendOp* op = free_send_ops_;
  if (op != nullptr) {
    free_send_ops_ = op->next;
    op->next = nullptr;
    return op;
  }
  send_op_store_.push_back(std::make_unique<SendOp>());
  return send_op_store_.back().get();
}

void Context::FreeSendOp(SendOp* op) {
  op->Reset();
  op->next = free_send_ops_;
  free_send_ops_ = op;
}

void Context::ScheduleTx(Conn* c) {
  if (c->in_tx_retry) return;
  c->in_tx_retry = true;
  tx_retry_.push_back(c->id);
}

void Context::PumpTxRetries() {
  if (tx_retry_.empty()) return;
  // Swapped with a kept scratch vector: PumpTx may schedule again.
  std::vector<uint64_t>& ids = tx_retry_scratch_;
  ids.clear();
  ids.swap(tx_retry_);
  for (uint64_t id : ids) {
    Conn* c = conns_.Find(id);
    if (c == nullptr) continue;
    c->in_tx_retry = false;
    PumpTx(c);
  }
}

void Context::PumpTx(Conn* c) {
  while (c->Open() && !c->txq.empty()) {
    if (PostSendOp(c, c->txq.front()) == PostResult::kBlocked) {
      ScheduleTx(c);
      return;
    }
  }
}

Context::PostResult Context::PostSendOp(Conn* c, SendOp* op) {
  if (c->peer->Unreachable()) {
    Break(c, FERRY_PEER_GONE,
          "fabric: the peer endpoint " + c->peer->printable +
              " (in this process) has been closed");
    return PostResult::kFailed;  // Break failed the whole queue
  }
  Classify(c, &op->segs, op->header.size());
  op->has_bulk = false;
  for (const SegRef& s : op->segs) op->has_bulk |= s.mode != wire::kInline;
  if (op->has_bulk && BulkMode(c) == wire::kRma && op->remote.empty()) {
    Status st = ExposeSegments(op);
    if (!st.ok()) {
      c->txq.pop_front();
      CompleteSendOp(op, st.code, st.message);
      return PostResult::kDropped;
    }
  }
  const size_t size = FrameSize(op->segs, op->header.size(), op->remote.size());
  if (size > std::min(eager_size_, c->peer_limits.eager_size)) {
    c->txq.pop_front();
    CompleteSendOp(op, FERRY_RESOURCE_EXHAUSTED,
                   Format("fabric: the message's frame (%zu bytes: header and "
                          "segment table) exceeds the peer's eager_size %u",
                          size, c->peer_limits.eager_size));
    return PostResult::kDropped;
  }
  TxBuf* b = GetTxBuf(/*control=*/false);
  if (b == nullptr) return PostResult::kBlocked;
  if (op->has_bulk) op->id = send_ops_.Insert(op);
  EncodeMsg(c, b->data, op->id, op->header.data(), op->header.size(), op->segs,
            op->remote);
  b->length = static_cast<uint32_t>(size);
  b->frame_type = wire::kMsg;
  b->conn_id = c->id;
  b->peer = c->peer;
  c->txq.pop_front();
  ++c->next_seq;
  if (!PostFrame(b)) {
    CompleteSendOp(
        op, c->broken_status != FERRY_OK ? c->broken_status : FERRY_PEER_GONE,
        c->broken_message.empty() ? "fabric: the send failed" : c->broken_message);
    return PostResult::kFailed;
  }
  if (op->has_bulk) {
    op->state =
        BulkMode(c) == wire::kRma ? SendOp::State::kAwaitFin : SendOp::State::kAwaitCts;
    c->waiting.push_back(op);
  } else {
    CompleteSendOp(op, FERRY_OK, "");
  }
  return PostResult::kPosted;
}

void Context::CompleteSendOp(SendOp* op, ferry_status_t status,
                             const std::string& message) {
  Conn* c = op->conn;
  auto it = std::find(c->waiting.begin(), c->waiting.end(), op);
  if (it != c->waiting.end()) c->waiting.erase(it);
  if (op->id != 0) send_ops_.Remove(op->id);
  if (status == FERRY_OK) {
    Emit(FERRY_EV_SEND_DONE, c, op->user_data);
  } else {
    EmitError(FERRY_EV_SEND_DONE, c, op->user_data, status, message);
  }
  FreeSendOp(op);  // releases per-operation registrations
}

void Context::FailQueuedSends(Conn* c, ferry_status_t status,
                              const std::string& message) {
  std::deque<SendOp*> q;
  q.swap(c->txq);
  for (SendOp* op : q) CompleteSendOp(op, status, message);
}

void Context::FailWaitingSends(Conn* c, ferry_status_t status, const std::string& message,
                               bool keep_exposed) {
  std::vector<SendOp*> ops = c->waiting;
  for (SendOp* op : ops) {
    if (keep_exposed && op->state == SendOp::State::kAwaitFin) continue;
    CompleteSendOp(op, status, message);
  }
}

}  // namespace ferry_fabric
