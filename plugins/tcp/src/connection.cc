// The lifecycle of Conn: connecting, breaking and closing. The send half is
// in send.cc, the receive half in receive.cc.
#include "connection.h"

#include "context.h"
#include "socket_util.h"

#include "ferry_plugin/log.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <climits>

namespace ferry_tcp {
namespace {

// Bytes one Service() may read for a connection before the others get a
// turn; the connection stays scheduled, so it does not wait for an edge.
constexpr size_t kRxBudget = size_t{8} << 20;
// Bytes close() reads and drops so the kernel ends with FIN rather than RST
// (an RST can destroy data the peer has not read yet).
constexpr size_t kCloseDrainLimit = size_t{1} << 20;

unsigned long long ULL(uint64_t v) {
  return static_cast<unsigned long long>(v);
}

}  // namespace

Conn::Conn(Context* ctx, int fd, State state, std::string peer, void* user_data,
           bool accepted)
    : Pollable(Kind::kConn),
      ctx_(ctx),
      fd_(fd),
      state_(state),
      peer_(std::move(peer)),
      user_data_(user_data),
      connect_user_data_(user_data),
      rx_enabled_(!accepted),
      rx_(ctx->config().rx_buffer_size) {
  // Until the peer's hello says otherwise: no extra limits from the peer,
  // and inline only what every receiver accepts.
  peer_limits_.max_header = UINT32_MAX;
  peer_limits_.max_segments = UINT32_MAX;
  peer_limits_.max_message = UINT64_MAX;
  peer_limits_.inline_limit = wire::kMinInline;
  peer_limits_.inline_total = wire::kMinInline;
  UpdateSendLimits();
}

void Conn::UpdateSendLimits() {
  const Config& c = ctx_->config();
  send_limits_.max_header = std::min(c.max_header_size, peer_limits_.max_header);
  send_limits_.max_segments = std::min(c.max_segments, peer_limits_.max_segments);
  send_limits_.max_message = std::min(c.max_message_size, peer_limits_.max_message);
  send_limits_.peer_inline_limit = peer_limits_.inline_limit;
  send_limits_.peer_inline_total = peer_limits_.inline_total;
}

Conn::~Conn() {
  while (SendOp* op = tx_.PopFront()) ctx_->send_ops().Put(op);
  ReleaseSocket(false);
}

// --- host calls ------------------------------------------------------------

void Conn::Close() {
  if (state_ == State::kClosed) {
    FERRY_PLUGIN_LOG(FERRY_LOG_WARN, "close() called twice for the connection to %s",
                     peer_.c_str());
    return;
  }
  State before = state_;
  state_ = State::kClosed;
  std::string cancelled = Format(
      "tcp: connect to %s cancelled: the host closed the connection", peer_.c_str());
  // A CONNECTED still queued becomes CANCELLED, arrivals still queued go.
  ctx_->RecallForClose(this, cancelled);
  if (before == State::kConnecting) {
    ctx_->EmitError(FERRY_EV_CONNECTED, this, connect_user_data_, FERRY_CANCELLED,
                    cancelled);
  }
  FailAllSends(FERRY_CANCELLED,
               Format("tcp: send cancelled: the host closed the connection "
                      "to %s",
                      peer_.c_str()));
  if (rx_state_ == RxState::kPlacing && placing_for_host_) {
    ctx_->EmitError(FERRY_EV_PLACE_DONE, this, place_user_data_, FERRY_CANCELLED,
                    Format("tcp: place cancelled: the host closed the "
                           "connection to %s",
                           peer_.c_str()));
  }
  rx_state_ = RxState::kDead;
  placement_.Clear();
  placing_for_host_ = false;
  ReleaseSocket(/*drain=*/true);
  ctx_->Emit(FERRY_EV_CLOSED, this, nullptr);
}

// --- context calls -----------------------------------------------------------

void Conn::OnEpoll(uint32_t events) {
  if (state_ == State::kConnecting) FinishConnect(events);
  if (state_ != State::kOpen) return;
  if ((events & EPOLLERR) != 0) {
    int err = TakeSocketError(fd_);
    if (err == 0) err = ECONNRESET;
    Fail(StatusForIoErrno(err), Format("tcp: connection to %s failed: %s", peer_.c_str(),
                                       ErrnoText(err).c_str()));
    return;
  }
  if ((events & EPOLLHUP) != 0) {
    Fail(FERRY_PEER_GONE,
         Format("tcp: connection to %s hung up (the peer reset it)", peer_.c_str()));
    return;
  }
  if ((events & (EPOLLIN | EPOLLRDHUP)) != 0) rx_ready_ = true;
  if ((events & EPOLLRDHUP) != 0) peer_shut_down_ = true;
  if ((events & EPOLLOUT) != 0) tx_blocked_ = false;
  ctx_->Schedule(this);
}

void Conn::Service() {
  if (state_ == State::kClosed) return;
  if (state_ == State::kOpen && !tx_.Empty() && !tx_blocked_) FlushTx();
  if (!rx_enabled_) return;
  size_t budget = kRxBudget;
  ServiceRx(&budget);
}

void Conn::StartStream() {
  tx_.PushFront(ctx_->NewHelloOp());
  FlushTx();
}

void Conn::FailConnect(int err) {
  Fail(StatusForConnectErrno(err),
       Format("tcp: connect to %s failed: %s", peer_.c_str(), ErrnoText(err).c_str()));
}

void Conn::OnAcceptDelivered() {
  rx_enabled_ = true;
  ScheduleIfRxWork();
}

// --- connection setup and teardown -----------------------------------------

void Conn::FinishConnect(uint32_t events) {
  if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0) return;
  int err = TakeSocketError(fd_);
  if (err == 0 && (events & (EPOLLERR | EPOLLHUP)) != 0) err = ECONNREFUSED;
  if (err != 0) {
    FailConnect(err);
    return;
  }
  state_ = State::kOpen;
  ctx_->Emit(FERRY_EV_CONNECTED, this, connect_user_data_);
  ctx_->AddOpen(this);
  StartStream();
}

void Conn::Fail(ferry_status_t status, const std::string& message) {
  if (state_ == State::kBroken || state_ == State::kClosed) return;
  bool was_connecting = state_ == State::kConnecting;
  state_ = State::kBroken;
  broken_status_ = status;
  broken_message_ = message;
  FERRY_PLUGIN_LOG(FERRY_LOG_INFO, "%s", message.c_str());
  ReleaseSocket(/*drain=*/false);
  if (was_connecting) {
    ctx_->EmitError(FERRY_EV_CONNECTED, this, connect_user_data_, status, message);
  }
  FailAllSends(status, message);
  if (rx_state_ == RxState::kPlacing) {
    // Completes from bytes already buffered, or fails: the socket is gone.
    size_t budget = SIZE_MAX;
    ContinuePlacement(&budget);
  } else if (rx_state_ != RxState::kHeld) {
    // A held arrival stays valid until the host answers it.
    rx_state_ = RxState::kDead;
  }
  if (!was_connecting) {
    ctx_->EmitError(FERRY_EV_CONN_BROKEN, this, nullptr, status, message);
  }
}

void Conn::FailOnEof() {
  std::string message;
  if (rx_state_ == RxState::kPlacing) {
    message = Format(
        "tcp: peer %s closed the connection in the middle of a message "
        "(%llu of %llu payload bytes received)",
        peer_.c_str(), ULL(placement_.total() - placement_.remaining()),
        ULL(placement_.total()));
  } else if (rx_.size() > 0) {
    message = Format(
        "tcp: peer %s closed the connection in the middle of a message "
        "(%zu bytes of an incomplete frame received)",
        peer_.c_str(), rx_.size());
  } else {
    message = Format("tcp: peer %s closed the connection", peer_.c_str());
  }
  Fail(FERRY_PEER_GONE, message);
}

void Conn::ReleaseSocket(bool drain) {
  if (fd_ < 0) return;
  ctx_->RemoveOpen(this);
  if (corked) ctx_->Uncork(this);
  // Explicitly, not by close(): a forked child may share the socket, and
  // then close() would leave the registration (and this pointer) in epoll.
  ctx_->Unregister(fd_);
  for (size_t drained = 0; drain && drained < kCloseDrainLimit;) {
    ssize_t n = recv(fd_, ctx_->drop_scratch(), Context::kDropScratchSize, 0);
    if (n > 0) {
      drained += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;
    }
  }
  CloseFd(fd_);
  fd_ = -1;
  rx_ready_ = false;
}

Status Conn::UnusableError(const char* what) const {
  if (state_ == State::kClosed) {
    return Error(FERRY_FAILED_PRECONDITION,
                 "tcp: %s a connection to %s that the host already closed", what,
                 peer_.c_str());
  }
  // The break's own status, except UNAVAILABLE (a failed connect): from a
  // post that would mean "back-pressure, retry", and retrying cannot help.
  ferry_status_t code =
      broken_status_ == FERRY_UNAVAILABLE ? FERRY_FAILED_PRECONDITION : broken_status_;
  return Error(code, "tcp: %s a broken connection: %s", what, broken_message_.c_str());
}

}  // namespace ferry_tcp
