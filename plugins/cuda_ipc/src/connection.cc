// A connection's life: the socket, writing frames, failure and close. The
// data path is in send.cc (posting, exporting device segments) and
// receive.cc (frames, arrivals, placements and their copies).
#include "connection.h"

#include "context.h"

#include "ferry_plugin/log.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

namespace ferry_cuda_ipc {

Conn::Conn(Context* ctx, int fd, std::string peer, bool same_process)
    : Pollable(Kind::kConn),
      ctx_(ctx),
      fd_(fd),
      peer_(std::move(peer)),
      same_process_(same_process) {}

Conn::~Conn() {
  CloseFd();
  for (auto& op : tx_) ReleaseSendResources(op.get());
  for (auto& [seq, op] : awaiting_ack_) ReleaseSendResources(op.get());
  tx_.clear();
  awaiting_ack_.clear();
  Gpu* gpu = ctx_->gpu();
  if (gpu == nullptr) return;
  const ferry_cuda::Driver& cu = gpu->cu();
  // fini with copies still in flight: never close a mapping under a copy
  // that has not ended (it is leaked instead); never block here.
  for (PendingCopy& pc : copies_) {
    bool ended = true;
    for (auto& [dev, ev] : pc.done) {
      if (gpu->Use(dev).ok() && cu.cuEventQuery(ev) == CUDA_ERROR_NOT_READY)
        ended = false;
    }
    for (Mapping* m : pc.pins) {
      if (!ended) m->leaked = true;
      Unpin(m);
    }
    if (ended) {
      for (auto& [dev, ev] : pc.done) gpu->GiveEvent(dev, ev);
    }
  }
  copies_.clear();
  DropMappings();
  for (auto& [slot, ev] : opened_events_) cu.cuEventDestroy(ev);
  for (EventSlot& s : slots_) {
    if (gpu->Use(s.dev).ok()) cu.cuEventDestroy(s.ev);
  }
}

void Conn::CloseFd() {
  if (fd_ < 0) return;
  // Out of epoll before close: a child that inherited the socket would
  // otherwise keep it reported under a freed pointer.
  (void)ctx_->SetEpoll(fd_, 0, &epoll_mask_, this);
  close(fd_);
  fd_ = -1;
  epoll_mask_ = 0;
}

void Conn::FailConnect(ferry_status_t status, const std::string& why) {
  state_ = State::kFailed;
  fail_status_ = status;
  fail_message_ = why;
  broken_queued_ = true;  // the failed CONNECTED says it all
  CloseFd();
}

void Conn::Announced() {
  announced_ = true;
  UpdateEpoll();
  if (state_ == State::kOpen) ctx_->Kick(this);
}

void Conn::UpdateEpoll() {
  if (fd_ < 0) return;
  uint32_t want = 0;
  if (!tx_.empty() && !waiting_on_producer()) want |= EPOLLOUT;
  if (announced_ && !held_) want |= EPOLLIN;
  // Holding an arrival we stop reading (our flow control) but still watch
  // for a hang-up once; after it, the fd leaves epoll until the answer.
  if (held_ && !peer_hung_up_) want |= EPOLLRDHUP;
  Status st = ctx_->SetEpoll(fd_, want, &epoll_mask_, this);
  if (!st.ok()) FERRY_PLUGIN_LOG(FERRY_LOG_ERROR, "%s", st.message.c_str());
}

void Conn::OnEpoll(uint32_t events) {
  if (state_ != State::kOpen) return;
  if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) != 0 && !tx_.empty()) Flush();
  if (state_ != State::kOpen) return;
  if (held_ && (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) {
    // Reported once the host answers the arrival and we read the EOF.
    peer_hung_up_ = true;
  }
  Service();
  UpdateEpoll();
}

void Conn::QueueFrame(std::unique_ptr<SendOp> op) {
  const bool was_empty = tx_.empty();
  tx_.push_back(std::move(op));
  if (was_empty) Flush();
  UpdateEpoll();
}

void Conn::QueueAck(uint64_t seq) {
  if (state_ != State::kOpen) return;
  auto op = std::make_unique<SendOp>();
  op->is_ack = true;
  op->seq = seq;
  op->meta.resize(sizeof(wire::FrameHead));
  wire::FrameHead h{};
  h.magic = wire::kMagic;
  h.type = wire::kAck;
  h.seq = seq;
  std::memcpy(op->meta.data(), &h, sizeof h);
  op->iov.push_back({op->meta.data(), op->meta.size()});
  QueueFrame(std::move(op));
}

bool Conn::ProducersDone(SendOp* op) {
  Gpu* gpu = ctx_->gpu();
  while (!op->producers.empty()) {
    auto [dev, ev] = op->producers.back();
    CUresult r = CUDA_ERROR_UNKNOWN;
    if (gpu->Use(dev).ok()) r = gpu->cu().cuEventQuery(ev);  // never blocks
    if (r == CUDA_ERROR_NOT_READY) return false;
    op->producers.pop_back();
    gpu->GiveEvent(dev, ev);
    if (r != CUDA_SUCCESS) {
      // The producer's stream failed (a sticky error in its context): its
      // bytes cannot be trusted, and the frames behind it wait on it.
      Fail(FERRY_INTERNAL,
           "cuda_ipc: the stream that produced a device segment failed: " +
               gpu->Err("cuEventQuery", r));
      return false;
    }
  }
  return true;
}

void Conn::Flush() {
  while (!tx_.empty() && fd_ >= 0) {
    SendOp* op = tx_.front().get();
    // Frames leave in order: one whose producer has not finished holds
    // back those behind it.
    if (!op->producers.empty() && !ProducersDone(op)) break;
    msghdr msg{};
    msg.msg_iov = op->iov.data() + op->iov_next;
    msg.msg_iovlen = std::min<size_t>(op->iov.size() - op->iov_next, IOV_MAX);
    const ssize_t n = sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      FailErrno("write", errno);
      return;
    }
    size_t left = static_cast<size_t>(n);
    while (left > 0 && op->iov_next < op->iov.size()) {
      iovec& v = op->iov[op->iov_next];
      const size_t take = std::min(left, v.iov_len);
      v.iov_base = static_cast<char*>(v.iov_base) + take;
      v.iov_len -= take;
      left -= take;
      if (v.iov_len == 0) ++op->iov_next;
    }
    while (op->iov_next < op->iov.size() && op->iov[op->iov_next].iov_len == 0) {
      ++op->iov_next;
    }
    if (op->iov_next < op->iov.size()) continue;
    std::unique_ptr<SendOp> done = std::move(tx_.front());
    tx_.pop_front();
    if (done->is_ack) continue;
    if (done->needs_ack) {
      // Its bytes stay borrowed until the receiver has copied them.
      awaiting_ack_[done->seq] = std::move(done);
    } else {
      CompleteSend(std::move(done), FERRY_OK, "");
    }
  }
  UpdateEpoll();
}

void Conn::ReleaseSendResources(SendOp* op) {
  if (Gpu* gpu = ctx_->gpu()) {
    for (auto& [dev, ev] : op->producers) gpu->GiveEvent(dev, ev);
  }
  op->producers.clear();
  for (int slot : op->slots) {
    if (slot >= 0 && static_cast<size_t>(slot) < slots_.size()) {
      slots_[static_cast<size_t>(slot)].busy = false;
    }
  }
  op->slots.clear();
  if (Gpu* gpu = ctx_->gpu()) {
    for (auto& [dev, block] : op->bounces) gpu->Free(dev, block);
  }
  op->bounces.clear();
}

void Conn::CompleteSend(std::unique_ptr<SendOp> op, ferry_status_t status,
                        const std::string& why) {
  ReleaseSendResources(op.get());
  if (op->is_ack) return;
  if (status == FERRY_OK) {
    ctx_->Emit(FERRY_EV_SEND_DONE, this, op->user_data);
  } else {
    ctx_->EmitError(FERRY_EV_SEND_DONE, this, op->user_data, status, why);
  }
}

void Conn::FailSends(ferry_status_t status, const std::string& why) {
  while (!tx_.empty()) {
    std::unique_ptr<SendOp> op = std::move(tx_.front());
    tx_.pop_front();
    CompleteSend(std::move(op), status, why);
  }
  for (auto& [seq, op] : awaiting_ack_) CompleteSend(std::move(op), status, why);
  awaiting_ack_.clear();
}

void Conn::Fail(ferry_status_t status, const std::string& why) {
  if (state_ != State::kOpen) return;
  state_ = State::kFailed;
  fail_status_ = status;
  fail_message_ = why;
  CloseFd();
  FailSends(status, why);
  // Opened handles from this peer are closed now (those under a copy in
  // flight once it ends); copies in flight end, or are abandoned after
  // abandon_ms, with the break's status.
  DropMappings();
  abandon_at_ = Clock::now() + std::chrono::milliseconds(ctx_->config().abandon_ms);
  if (!broken_queued_) {
    broken_queued_ = true;
    ctx_->EmitError(FERRY_EV_CONN_BROKEN, this, nullptr, status, why);
  }
  FERRY_PLUGIN_LOG(FERRY_LOG_DEBUG, "connection to %s broken: %s", peer_.c_str(),
                   why.c_str());
}

void Conn::FailErrno(const char* what, int err) {
  const bool gone = err == EPIPE || err == ECONNRESET || err == ENOTCONN;
  Fail(gone ? FERRY_PEER_GONE : FERRY_UNKNOWN,
       "cuda_ipc: " +
           ErrnoText(err, std::string(what) + " on the connection to " + peer_) +
           (gone ? " (the peer closed or died)" : ""));
}

void Conn::Close() {
  if (state_ == State::kClosing) return;
  // What the host has not seen yet: arrivals are dropped, a CONNECTED
  // completes with CANCELLED.
  ctx_->events().ForEachQueued([this](QueuedEvent& e) {
    if (e.owner != this) return;
    if (e.type == FERRY_EV_ARRIVAL) {
      e.suppressed = true;
    } else if (e.type == FERRY_EV_CONNECTED && e.status == FERRY_OK) {
      e.status = FERRY_CANCELLED;
      e.text = "cuda_ipc: the connection was closed before it completed";
    }
  });
  const bool failed = state_ == State::kFailed;
  const ferry_status_t status = failed ? fail_status_ : FERRY_CANCELLED;
  const std::string why =
      failed ? fail_message_ : "cuda_ipc: the connection was closed (close())";
  state_ = State::kClosing;
  broken_queued_ = true;
  CloseFd();
  FailSends(status, why);
  if (held_) ReleaseArrival();
  DropMappings();
  abandon_at_ = Clock::now() + std::chrono::milliseconds(ctx_->config().abandon_ms);
  ctx_->Forget(this);
  MaybeQueueClosed();
}

void Conn::MaybeQueueClosed() {
  if (state_ != State::kClosing || closed_queued_ || !copies_.empty()) return;
  closed_queued_ = true;
  ctx_->Emit(FERRY_EV_CLOSED, this, nullptr);
}

}  // namespace ferry_cuda_ipc
