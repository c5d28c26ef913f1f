// Frames on the wire: the registered bounce buffers, posting with a retry
// list for a full queue, control frames (injected when small), and what a
// send completion or completion error means.
//
// A frame is always a copy in the plugin's own bounce buffer (or injected),
// so a send that fails with "receiver not ready" (FI_EAGAIN, EFA's RNR) is
// posted again from the same copy; the receiver's sequence numbers put it
// back in order, so nothing is lost or duplicated.
#include "context.h"

#include "fi_error.h"

#include "ferry_plugin/log.h"

#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstring>

namespace ferry_fabric {

// --- bounce buffers and frames -------------------------------------------------

TxBuf* Context::GetTxBuf(bool control) {
  // Data frames leave a reserve so FIN/ACCEPT/DISCONNECT always find one
  // (they are what frees the peer's resources).
  if (!control && tx_pool_.available() <= tx_reserve_) return nullptr;
  return tx_pool_.Get();
}

bool Context::PostFrame(TxBuf* b) {
  if (b->peer->Unreachable()) {
    const uint64_t conn_id = b->conn_id;
    const uint8_t type = b->frame_type;
    const std::string who = b->peer->printable;
    tx_pool_.Put(b);
    HandleTxFailure(
        conn_id, type, FERRY_PEER_GONE,
        "fabric: the peer endpoint " + who + " (in this process) has been closed");
    return false;
  }
  ssize_t rc =
      fi_send(endpoint_->ep(), b->data, b->length, b->desc, b->peer->addr, AsContext(b));
  if (rc == 0) return true;
  if (rc == -FI_EAGAIN) {
    QueueResend(b);
    return true;
  }
  const uint64_t conn_id = b->conn_id;
  const uint8_t type = b->frame_type;
  const std::string text = "fabric: sending to " + b->peer->printable + ": " +
                           FiText("fi_send", static_cast<int>(rc), provider_);
  tx_pool_.Put(b);
  HandleTxFailure(conn_id, type, StatusForCompletionError(static_cast<int>(-rc)), text);
  return false;
}

void Context::QueueResend(TxBuf* b) {
  b->next = nullptr;
  if (resend_tail_ != nullptr) {
    resend_tail_->next = b;
  } else {
    resend_head_ = b;
  }
  resend_tail_ = b;
}

void Context::DrainResends() {
  while (resend_head_ != nullptr) {
    TxBuf* b = resend_head_;
    if (b->peer->Unreachable()) {
      resend_head_ = b->next;
      if (resend_head_ == nullptr) resend_tail_ = nullptr;
      PostFrame(b);  // reports the peer as gone
      continue;
    }
    ssize_t rc = fi_send(endpoint_->ep(), b->data, b->length, b->desc, b->peer->addr,
                         AsContext(b));
    if (rc == -FI_EAGAIN) return;  // still full: the next progress() retries
    resend_head_ = b->next;
    if (resend_head_ == nullptr) resend_tail_ = nullptr;
    b->next = nullptr;
    if (rc != 0) {
      const uint64_t conn_id = b->conn_id;
      const uint8_t type = b->frame_type;
      const std::string text = "fabric: sending to " + b->peer->printable + ": " +
                               FiText("fi_send", static_cast<int>(rc), provider_);
      tx_pool_.Put(b);
      HandleTxFailure(conn_id, type, StatusForCompletionError(static_cast<int>(-rc)),
                      text);
    }
  }
}

void Context::SendControl(Peer* peer, uint64_t conn_id, const void* frame, size_t len,
                          const void* tail, size_t tail_len) {
  const size_t total = len + tail_len;
  const uint8_t type = static_cast<const wire::Head*>(frame)->type;
  // Small control frames are injected: no bounce buffer, no completion. Not
  // CONNECT: its completion error is how a refused connection shows.
  if (type != wire::kConnect && total <= inject_size_ && !peer->Unreachable() &&
      pending_control_.empty()) {
    char* buf = inject_scratch_.data();
    std::memcpy(buf, frame, len);
    if (tail_len > 0) std::memcpy(buf + len, tail, tail_len);
    if (fi_inject(endpoint_->ep(), buf, total, peer->addr) == 0) return;
  }
  TxBuf* b = pending_control_.empty() ? GetTxBuf(/*control=*/true) : nullptr;
  if (b == nullptr) {
    std::string bytes(static_cast<const char*>(frame), len);
    if (tail_len > 0) bytes.append(static_cast<const char*>(tail), tail_len);
    pending_control_.push_back(PendingControl{peer, conn_id, std::move(bytes)});
    return;
  }
  std::memcpy(b->data, frame, len);
  if (tail_len > 0) std::memcpy(b->data + len, tail, tail_len);
  b->length = static_cast<uint32_t>(total);
  b->frame_type = type;
  b->conn_id = conn_id;
  b->peer = peer;
  PostFrame(b);
}

void Context::DrainPendingControl() {
  while (!pending_control_.empty()) {
    TxBuf* b = GetTxBuf(/*control=*/true);
    if (b == nullptr) return;
    PendingControl pc = std::move(pending_control_.front());
    pending_control_.pop_front();
    std::memcpy(b->data, pc.bytes.data(), pc.bytes.size());
    b->length = static_cast<uint32_t>(pc.bytes.size());
    b->frame_type = static_cast<uint8_t>(pc.bytes[0]);
    b->conn_id = pc.conn_id;
    b->peer = pc.peer;
    PostFrame(b);
  }
}

void Context::OnSendCompletion(TxBuf* b) {
  tx_pool_.Put(b);
  if (!pending_control_.empty()) DrainPendingControl();
}

void Context::OnSendError(TxBuf* b, const fi_cq_err_entry& err) {
  if (err.err == FI_EAGAIN) {
    // Receiver not ready after the provider's own retries: post the same
    // copy again (the receiver orders by sequence number).
    QueueResend(b);
    return;
  }
  const uint64_t conn_id = b->conn_id;
  const uint8_t type = b->frame_type;
  const std::string text = "fabric: sending to " + b->peer->printable +
                           " failed: " + CqErrorText(endpoint_->cq(), err, provider_);
  tx_pool_.Put(b);
  HandleTxFailure(conn_id, type, StatusForCompletionError(err.err), text);
}

void Context::HandleTxFailure(uint64_t conn_id, uint8_t frame_type, ferry_status_t status,
                              const std::string& text) {
  FERRY_PLUGIN_LOG(FERRY_LOG_DEBUG, "%s", text.c_str());
  Conn* c = conns_.Find(conn_id);
  if (c == nullptr) return;
  if (c->state == Conn::State::kConnecting && !c->close_called) {
    // A connection that never got an answer was refused, whatever the
    // provider calls it.
    FailConnect(c, FERRY_UNAVAILABLE,
                "fabric: connecting to " + c->peer_address + " failed: " + text);
    return;
  }
  (void)frame_type;
  Break(c, status, text);
}

}  // namespace ferry_fabric
