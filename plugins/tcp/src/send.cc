// The send half of Conn: send() checks and encodes a message into a SendOp
// and writes it at once when the connection is idle; the send queue flushes
// the rest as the socket allows, and each flushed op becomes a SEND_DONE.
// The lifecycle is in connection.cc, the receive half in receive.cc.
#include "connection.h"

#include "context.h"
#include "message_encoder.h"
#include "socket_util.h"

#include <string>

namespace ferry_tcp {
namespace {

const std::string kNoMessage;

}  // namespace

ferry_status_t Conn::Send(const ferry_send_args_t& args, Status* error) {
  if (state_ == State::kClosed || state_ == State::kBroken) {
    return Report(error, UnusableError("send() on"));
  }
  const Config& c = ctx_->config();
  if (tx_.size() >= c.max_pending_sends) {
    return Report(error, Error(FERRY_UNAVAILABLE,
                               "tcp: %zu sends already pending on the connection to %s "
                               "(max_pending_sends): call progress() and post again",
                               tx_.size(), peer_.c_str()));
  }
  SendOp* op = ctx_->send_ops().Get();
  ferry_status_t code;
  try {
    code = EncodeMessage(args, send_limits_, op, error);
  } catch (...) {  // out of memory for the header copy: the entry reports it
    ctx_->send_ops().Put(op);
    throw;
  }
  if (code != FERRY_OK) {
    ctx_->send_ops().Put(op);
    return code;
  }
  op->user_data = args.user_data;
  bool was_idle = tx_.Empty();
  tx_.PushBack(op);
  if (state_ != State::kOpen || !was_idle || tx_blocked_) return FERRY_OK;
  if (ctx_->config().busy_poll && write_epoch_ == ctx_->progress_epoch()) {
    // Busy-poll mode, and this connection already wrote since the host's
    // last progress(): a burst (replies to a batch of arrivals, calls
    // posted back to back). This send and any that follow wait for the next
    // progress(), which a spinning host makes within microseconds, and go
    // out together in one sendmsg: on loopback each send() also runs the
    // receiver's TCP processing, which for a burst (a batch of RRef
    // creations, say) is most of the sender's time. Only
    // bursts wait: the first send after a progress() is written at once,
    // so a lone message (a ping-pong, a call, its reply) never does.
    ctx_->Cork(this);
    return FERRY_OK;
  }
  // The latency path: write now rather than waiting for progress(). The
  // completion is still only queued (never inline).
  write_epoch_ = ctx_->progress_epoch();
  FlushTx();
  return FERRY_OK;
}

void Conn::FlushCorked() {
  corked = false;
  if (state_ != State::kOpen || tx_.Empty() || tx_blocked_) return;
  write_epoch_ = ctx_->progress_epoch();
  FlushTx();
}

void Conn::FlushTx() {
  TxQueue::FlushResult r =
      tx_.Flush(fd_, ctx_->iov_scratch(), ctx_->iov_scratch_size(),
                [this](SendOp* op) { CompleteSend(op, FERRY_OK, kNoMessage); });
  if (r.error != 0) {
    Fail(StatusForIoErrno(r.error), Format("tcp: sending to %s failed: %s", peer_.c_str(),
                                           ErrnoText(r.error).c_str()));
    return;
  }
  tx_blocked_ = r.blocked;
}

void Conn::CompleteSend(SendOp* op, ferry_status_t status, const std::string& message) {
  if (!op->internal) {
    if (status == FERRY_OK) {
      ctx_->Emit(FERRY_EV_SEND_DONE, this, op->user_data);
    } else {
      ctx_->EmitError(FERRY_EV_SEND_DONE, this, op->user_data, status, message);
    }
  }
  ctx_->send_ops().Put(op);
}

void Conn::FailAllSends(ferry_status_t status, const std::string& message) {
  while (SendOp* op = tx_.PopFront()) CompleteSend(op, status, message);
}

}  // namespace ferry_tcp
