// Connection lifecycle: the progress step, peer death, corruption, close.
#include "connection.h"

#include "config.h"
#include "context.h"
#include "setup_socket.h"
#include "shared_atomic.h"

#include "ferry_plugin/log.h"

#include <unistd.h>

#include <cstring>

namespace ferry_shm {

Conn::Conn(Context* ctx, bool outbound, const std::string& path)
    : ctx_(ctx), outbound_(outbound), path_(path) {}

Conn::~Conn() {
  ReleaseResources();
  while (!ops_.empty()) delete ops_.pop_front();
  for (SendOp* op : free_ops_) delete op;
}

const Config& Conn::config() const {
  return ctx_->config();
}

void Conn::Emit(EventSink* sink, int32_t type, ferry_status_t status, void* user_data,
                const std::string& message) {
  ferry_event_t ev = EventSink::Make(type, status, handle(), user_data,
                                     user_data_.load(std::memory_order_acquire));
  sink->Emit(ev, message, &user_data_);
}

void Conn::Close() {
  std::lock_guard<ferry_plugin::Mutex> lock(mu_);
  if (closing_) return;
  closing_ = true;
  ctx_->Kick();
}

Conn::Step Conn::Progress(EventSink* sink) {
  std::lock_guard<ferry_plugin::Mutex> lock(mu_);
  if (closing_) {
    Finalize(sink);
    return Step::kDead;
  }
  if (!outbound_ && state_ == State::kFailed) {
    // An inbound connection that failed set-up was never reported: it just
    // goes away.
    ReleaseResources();
    return Step::kDead;
  }
  if (InSetup()) {
    StepSetup(sink);
    return InSetup() ? Step::kIdle : Step::kWorked;
  }
  if (state_ != State::kEstablished) return Step::kIdle;
  bool worked = false;
  Status st;
  if (!tx_error_.ok()) st = std::move(tx_error_);  // found by a send()
  tx_error_.code = FERRY_OK;
  if (st.ok() && broken_.ok() && (!ops_.empty() || !written_sends_.empty())) {
    if (next_write_ < ops_.size()) worked |= PumpTx(&st);
    if (st.ok()) worked |= ReapSends(sink, &st);
  }
  if (st.ok()) worked |= StepRx(sink, &st);
  if (!st.ok()) {
    Break(sink, st);
    worked = true;
  }
  return worked ? Step::kWorked : Step::kIdle;
}

void Conn::OnSocketEvent(EventSink* sink) {
  std::lock_guard<ferry_plugin::Mutex> lock(mu_);
  if (closing_ || sock_ < 0) return;
  if (InSetup()) {
    StepSetup(sink);
    return;
  }
  // After set-up nothing is sent on the socket: readable means EOF (the
  // kernel closed the peer's end: it closed the connection or died).
  char buf[64];
  ssize_t n = recv(sock_, buf, sizeof buf, MSG_DONTWAIT);
  if (n > 0) {
    FERRY_PLUGIN_LOG(FERRY_LOG_WARN,
                     "shm: ignoring %zd unexpected bytes on the set-up socket of %s", n,
                     path_.c_str());
    return;
  }
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  OnPeerGone(sink,
             "shm: the peer closed the connection or its process died "
             "(EOF on the set-up socket)");
}

void Conn::OnPeerGone(EventSink* sink, const std::string& why) {
  if (peer_gone_ || !broken_.ok()) return;
  peer_gone_ = true;
  broken_ = Status(FERRY_PEER_GONE, why);
  CloseSocket();
  // Our sends will never be read. What the peer finished sending is still
  // in its ring: StepRx delivers it, then emits CONN_BROKEN.
  FailSends(sink, FERRY_PEER_GONE, why);
  if (outbound_) {
    // A dead listener cannot unlink its socket file: survivors do.
    std::string dir = path_.substr(0, path_.rfind('/'));
    if (!dir.empty()) SweepStaleSockets(dir);
  }
}

void Conn::Break(EventSink* sink, const Status& why) {
  if (!broken_.ok() && broken_.code != FERRY_PEER_GONE) return;
  const bool was_gone = peer_gone_;
  broken_ = why;
  FERRY_PLUGIN_LOG(FERRY_LOG_ERROR, "%s", why.message.c_str());
  // Closing the socket tells the peer at once.
  CloseSocket();
  if (!was_gone) FailSends(sink, why.code, why.message);
  if (rx_ == Rx::kPlacing || rx_ == Rx::kSkipping) {
    if (msg_status_.ok()) msg_status_ = why;
    FinishMessage(sink);
  }
  StopArrivals(sink);
}

void Conn::StopArrivals(EventSink* sink) {
  if (arrivals_stopped_) return;
  arrivals_stopped_ = true;
  Emit(sink, FERRY_EV_CONN_BROKEN, broken_.code, nullptr, broken_.message);
}

void Conn::Finalize(EventSink* sink) {
  // Tell the peer first (shared flag, then EOF): a CMA read of our buffers
  // that ends after this point is thrown away, so the host may reuse them
  // as soon as it sees CANCELLED.
  if (tx_seg_.control() != nullptr) {
    StoreRelease(&tx_seg_.control()->owner.closed, 1u);
    FenceSeqCst();
  }
  CloseSocket();
  const std::string why = "shm: cancelled by close()";
  if (outbound_ && !reported_) {
    Emit(sink, FERRY_EV_CONNECTED, FERRY_CANCELLED, connect_user_data_,
         "shm: connect cancelled by close()");
    reported_ = true;
  } else if (outbound_) {
    // Reported, but maybe still waiting in the backlog, unseen.
    sink->CancelUnseenConnected(handle(), "shm: connect cancelled by close()");
  }
  FailSends(sink, FERRY_CANCELLED, why);
  if (rx_ == Rx::kPlacing) {
    Emit(sink, FERRY_EV_PLACE_DONE, FERRY_CANCELLED, place_user_data_, why);
  }
  rx_ = Rx::kIdle;
  Emit(sink, FERRY_EV_CLOSED, FERRY_OK, nullptr);
  ReleaseResources();
}

void Conn::CloseSocket() {
  if (sock_ < 0) return;
  ctx_->Unregister(sock_);
  close(sock_);
  sock_ = -1;
}

void Conn::ReleaseResources() {
  if (counted_in_setup_) {
    ctx_->SetupEnded();
    counted_in_setup_ = false;
  }
  CloseSocket();
  if (bell_registered_) {
    ctx_->Unregister(bell_.own_fd());
    bell_registered_ = false;
  }
  bell_.Close();
  tx_seg_.Unmap();
  tx_seg_.CloseFd();
  rx_seg_.Unmap();
  rx_seg_.CloseFd();
}

Status Conn::RefuseIfUnusable() const {
  if (closing_) {
    return Error(FERRY_FAILED_PRECONDITION, "shm: the connection is being closed");
  }
  if (state_ == State::kFailed) {
    // Not UNAVAILABLE (the connect error, often): that would mean "retry".
    return Status(
        FERRY_FAILED_PRECONDITION,
        "shm: the connection was never established: " + pending_failure_.message);
  }
  if (!broken_.ok()) {
    return Status(broken_.code, "shm: the connection is broken: " + broken_.message);
  }
  return Status();
}

Status Conn::PeerAddress(char* buf, uint64_t buf_len) {
  std::string text;
  {
    std::lock_guard<ferry_plugin::Mutex> lock(mu_);
    text = path_;
    if (state_ == State::kEstablished) {
      text += Format(" pid=%d uid=%u data=%s", static_cast<int>(peer_.pid),
                     static_cast<unsigned>(peer_.uid), cma_send_ ? "cma" : "ring");
    }
  }
  if (buf == nullptr || text.size() + 1 > buf_len) {
    return Error(FERRY_RESOURCE_EXHAUSTED, "shm: the peer address needs %zu bytes",
                 text.size() + 1);
  }
  std::memcpy(buf, text.c_str(), text.size() + 1);
  return Status();
}

void Conn::Arm() {
  std::lock_guard<ferry_plugin::Mutex> lock(mu_);
  if (state_ != State::kEstablished || !broken_.ok()) return;
  bell_.Arm();
  armed_ = true;
}

void Conn::Disarm() {
  std::lock_guard<ferry_plugin::Mutex> lock(mu_);
  if (!armed_) return;
  bell_.Disarm();
  armed_ = false;
}

bool Conn::HasWork() {
  std::lock_guard<ferry_plugin::Mutex> lock(mu_);
  if (closing_) return true;
  if (state_ == State::kConnecting) return true;    // retries or a failure to report
  if (state_ != State::kEstablished) return false;  // sockets wake us
  return TxHasWork() || RxHasWork();
}

}  // namespace ferry_shm
