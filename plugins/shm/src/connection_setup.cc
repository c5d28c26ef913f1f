// Connection set-up: connect, exchange HELLO (segment and doorbell fds) and
// READY (the CMA verdict) over the Unix socket, map the peer's segment.
// Runs inside progress(); every step is a non-blocking syscall.
#include "clock.h"
#include "cma.h"
#include "config.h"
#include "connection.h"
#include "context.h"
#include "handshake.h"
#include "setup_socket.h"

#include "ferry_plugin/log.h"

#include <sys/random.h>
#include <unistd.h>

namespace ferry_shm {

Conn* Conn::NewOutbound(Context* ctx, const std::string& path, void* user_data) {
  Conn* c = new Conn(ctx, /*outbound=*/true, path);
  c->BeginConnect(user_data);
  return c;
}

Conn* Conn::NewInbound(Context* ctx, int fd, const ucred& cred,
                       const std::string& listener_path, void* listener_user_data,
                       std::shared_ptr<std::atomic<bool>> listener_open) {
  Conn* c = new Conn(ctx, /*outbound=*/false, listener_path);
  c->sock_ = fd;
  c->peer_ = cred;
  c->listener_user_data_ = listener_user_data;
  c->listener_open_ = std::move(listener_open);
  c->state_ = State::kHandshake;
  c->deadline_ns_ = MonotonicNs() + ctx->config().connect_timeout_ms * 1000000ull;
  ctx->SetupBegan();
  c->counted_in_setup_ = true;
  ctx->Register(fd, &c->sock_poll_);
  return c;
}

void Conn::BeginConnect(void* user_data) {
  connect_user_data_ = user_data;
  user_data_.store(user_data, std::memory_order_release);
  ctx_->SetupBegan();
  counted_in_setup_ = true;
  deadline_ns_ = MonotonicNs() + config().connect_timeout_ms * 1000000ull;
  state_ = State::kConnecting;
  bool pending = false;
  int fd = -1;
  Status st = StartConnect(path_, &fd, &pending);
  if (!st.ok()) {
    pending_failure_ = st;  // reported by FERRY_EV_CONNECTED
    return;
  }
  sock_ = fd;
  ctx_->Register(sock_, &sock_poll_);
}

void Conn::StepSetup(EventSink* sink) {
  if (!pending_failure_.ok()) {
    FailSetup(sink, pending_failure_);
    return;
  }
  if (MonotonicNs() > deadline_ns_) {
    FailSetup(sink, Error(FERRY_DEADLINE_EXCEEDED,
                          "shm: set-up with %s did not finish within %u ms "
                          "(connect_timeout_ms)",
                          path_.c_str(), config().connect_timeout_ms));
    return;
  }
  bool finished = false;
  Status st = SetupOnce(&finished);
  if (!st.ok()) {
    FailSetup(sink, st);
  } else if (finished) {
    Established(sink);
  }
}

Status Conn::SetupOnce(bool* finished) {
  Status st;
  if (state_ == State::kConnecting) {
    bool pending = false;
    st = RetryConnect(sock_, path_, &pending);
    if (!st.ok() || pending) return st;
    state_ = State::kHandshake;
  }
  if (outbound_ && peer_.pid == 0) {
    // The listener's credentials, as the kernel recorded them.
    st = PeerCredentials(sock_, &peer_);
    if (!st.ok()) return st;
    if (peer_.uid != geteuid()) {
      return Error(FERRY_PERMISSION_DENIED,
                   "shm: the listener at %s runs as uid %u, not as this "
                   "process's uid %u: refusing to share memory with it",
                   path_.c_str(), static_cast<unsigned>(peer_.uid),
                   static_cast<unsigned>(geteuid()));
    }
  }
  if (tx_seg_.control() == nullptr) {
    st = CreateOwnSide();
    if (!st.ok()) return st;
  }
  if (!hello_sent_) {
    HandshakeMsg hello = MakeHello(config().ring_size, &probe_word_, config().busy_poll);
    const int fds[2] = {tx_seg_.fd(), bell_.own_fd()};
    bool again = false;
    st = SendWithFds(sock_, &hello, sizeof hello, fds, 2, &again);
    if (!st.ok() || again) return st;
    hello_sent_ = true;
    tx_seg_.CloseFd();  // the message holds its own reference
  }
  for (;;) {
    HandshakeMsg msg;
    size_t len = 0;
    int fds[2];
    int nfds = 0;
    RecvResult result;
    st = RecvWithFds(sock_, &msg, sizeof msg, &len, fds, 2, &nfds, &result);
    if (!st.ok() || result == RecvResult::kWouldBlock) return st;
    if (result == RecvResult::kEof) {
      return Error(FERRY_UNAVAILABLE,
                   "shm: the peer at %s closed the connection during set-up",
                   path_.c_str());
    }
    if (!hello_received_) {
      st = OnHello(&msg, len, fds, nfds);
      if (!st.ok()) return st;
      hello_received_ = true;
      continue;
    }
    for (int i = 0; i < nfds; ++i) close(fds[i]);
    HandshakeMsg ready;
    st = ParseHandshake(&msg, len, kMsgReady, &ready);
    if (!st.ok()) return st;
    cma_send_ = ready.cma_readable != 0 && config().cma_send;
    *finished = true;
    return Status();
  }
}

Status Conn::CreateOwnSide() {
  Status st =
      tx_seg_.Create(config().ring_size, outbound_ ? kRoleConnector : kRoleAcceptor);
  if (!st.ok()) return st;
  writer_.Init(tx_seg_.ring(), tx_seg_.ring_size(), &tx_seg_.control()->consumer);
  st = bell_.Create();
  if (!st.ok()) return st;
  ctx_->Register(bell_.own_fd(), &bell_poll_);
  bell_registered_ = true;
  if (getrandom(&probe_word_, sizeof probe_word_, GRND_NONBLOCK) != sizeof probe_word_) {
    probe_word_ = reinterpret_cast<uintptr_t>(this) ^ 0x5bd1e9955bd1e995ull;
  }
  return Status();
}

Status Conn::OnHello(const void* buf, size_t len, const int* fds, int nfds) {
  HandshakeMsg hello;
  Status st = ParseHandshake(buf, len, kMsgHello, &hello);
  if (st.ok() && nfds != 2) {
    st = Error(FERRY_DATA_LOSS, "shm: the peer's HELLO carried %d fds, expected 2", nfds);
  }
  if (!st.ok()) {
    for (int i = 0; i < nfds; ++i) close(fds[i]);
    return st;
  }
  st = rx_seg_.MapPeer(fds[0], hello.ring_size);
  if (!st.ok()) {
    close(fds[1]);
    return st;
  }
  st = bell_.Attach(fds[1], &tx_seg_.control()->owner, &rx_seg_.control()->owner,
                    (hello.flags & kHelloNeverSleeps) == 0);
  if (!st.ok()) return st;
  reader_.Init(rx_seg_.ring(), rx_seg_.ring_size(), &rx_seg_.control()->consumer);
  // May we read the peer's memory? Only a real read tells (ptrace rules).
  bool readable = false;
  if (config().cma) {
    readable = CmaProbe(peer_.pid, hello.probe_address, hello.probe_value, &cma_note_);
    if (!readable) {
      FERRY_PLUGIN_LOG(FERRY_LOG_INFO,
                       "shm: cross-memory attach to pid %d is not possible (%s): large "
                       "segments from it are copied through the ring",
                       static_cast<int>(peer_.pid), cma_note_.c_str());
    }
  }
  HandshakeMsg ready = MakeReady(readable);
  bool again = false;
  st = SendWithFds(sock_, &ready, sizeof ready, nullptr, 0, &again);
  if (st.ok() && again) {
    st = Error(FERRY_UNAVAILABLE, "shm: the set-up socket to %s is full", path_.c_str());
  }
  return st;
}

void Conn::Established(EventSink* sink) {
  state_ = State::kEstablished;
  if (counted_in_setup_) {
    ctx_->SetupEnded();
    counted_in_setup_ = false;
  }
  if (!outbound_ && listener_open_ && !listener_open_->load()) {
    // Its listener was closed before the handshake finished.
    state_ = State::kFailed;
    return;
  }
  FERRY_PLUGIN_LOG(FERRY_LOG_DEBUG, "shm: %s %s (peer pid %d, large segments by %s)",
                   outbound_ ? "connected to" : "accepted on", path_.c_str(),
                   static_cast<int>(peer_.pid), cma_send_ ? "CMA" : "ring copy");
  reported_ = true;
  if (outbound_) {
    Emit(sink, FERRY_EV_CONNECTED, FERRY_OK, connect_user_data_);
  } else {
    Emit(sink, FERRY_EV_ACCEPTED, FERRY_OK, listener_user_data_);
  }
  Status st;
  if (!ops_.empty()) PumpTx(&st);
  if (!st.ok()) Break(sink, st);
}

void Conn::FailSetup(EventSink* sink, const Status& why) {
  state_ = State::kFailed;
  pending_failure_ = why;
  ReleaseResources();
  if (outbound_) {
    reported_ = true;
    Emit(sink, FERRY_EV_CONNECTED, why.code, connect_user_data_, why.message);
    FailSends(sink, why.code, why.message);
  } else {
    FERRY_PLUGIN_LOG(
        why.code == FERRY_PERMISSION_DENIED ? FERRY_LOG_WARN : FERRY_LOG_INFO,
        "shm: dropped an incoming connection on %s: %s", path_.c_str(),
        why.message.c_str());
  }
}

}  // namespace ferry_shm
