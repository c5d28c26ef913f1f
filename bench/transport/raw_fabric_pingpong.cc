#include "transport/raw_fabric_pingpong.h"

#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace ferry::bench {
namespace {

constexpr uint64_t kDataTag = 1;          // data messages (msg path)
constexpr uint64_t kCtrlTag = 2;          // set-up and the streaming test's ack
constexpr uint64_t kRemoteData = 1;       // remote CQ data of an RMA message
constexpr size_t kCtrlSize = 64 * 1024;   // per direction; > a 1024-key ring
constexpr uint32_t kMagic = 0x46525746;   // "FWRF"
constexpr size_t kMaxOps = 4096;          // > the largest window (1024) + set-up
constexpr int kWelcomeTimeoutMs = 30000;  // the peer accepts within set-up

using Clock = std::chrono::steady_clock;

void PutU32(std::string* out, uint32_t v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof v);
}
void PutU64(std::string* out, uint64_t v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof v);
}
bool GetU32(const std::string& in, size_t* pos, uint32_t* v) {
  if (in.size() - *pos < sizeof *v) return false;
  std::memcpy(v, in.data() + *pos, sizeof *v);
  *pos += sizeof *v;
  return true;
}
bool GetU64(const std::string& in, size_t* pos, uint64_t* v) {
  if (in.size() - *pos < sizeof *v) return false;
  std::memcpy(v, in.data() + *pos, sizeof *v);
  *pos += sizeof *v;
  return true;
}

// The set-up message: who I am (the client sends its endpoint name) and
// where the peer may write (address and key of each receive buffer).
std::string EncodeSetup(const std::string& name,
                        const std::vector<RawFabricRegion>& regions) {
  std::string out;
  PutU32(&out, kMagic);
  PutU32(&out, static_cast<uint32_t>(name.size()));
  out += name;
  PutU32(&out, static_cast<uint32_t>(regions.size()));
  for (const RawFabricRegion& r : regions) {
    PutU64(&out, r.remote_addr);
    PutU64(&out, r.key);
  }
  return out;
}

bool DecodeSetup(const std::string& in, std::string* name,
                 std::vector<RawFabricRegion>* regions) {
  size_t pos = 0;
  uint32_t magic = 0, name_len = 0, n = 0;
  if (!GetU32(in, &pos, &magic) || magic != kMagic || !GetU32(in, &pos, &name_len) ||
      in.size() - pos < name_len) {
    return false;
  }
  *name = in.substr(pos, name_len);
  pos += name_len;
  if (!GetU32(in, &pos, &n)) return false;
  regions->clear();
  for (uint32_t i = 0; i < n; ++i) {
    RawFabricRegion r;
    if (!GetU64(in, &pos, &r.remote_addr) || !GetU64(in, &pos, &r.key)) {
      return false;
    }
    regions->push_back(r);
  }
  return pos == in.size();
}

}  // namespace

StatusOr<std::unique_ptr<RawFabricPingPong>> RawFabricPingPong::Open(
    const std::string& provider, const std::string& path, PollMode mode,
    BufferSet* buffers) {
  auto endpoint = RawFabricEndpoint::Open(provider, path != "msg", mode);
  if (!endpoint.ok() && path == "auto") {
    // No RMA with remote CQ data: the message path is the floor then.
    endpoint = RawFabricEndpoint::Open(provider, false, mode);
  }
  if (!endpoint.ok()) return endpoint.status();
  std::unique_ptr<RawFabricPingPong> pp(
      new RawFabricPingPong(std::move(endpoint).value(), buffers));
  pp->rma_ = pp->endpoint_->rma();
  pp->ops_.resize(kMaxOps);
  for (size_t i = kMaxOps; i > 0; --i) {
    pp->free_ops_.push_back(static_cast<uint32_t>(i - 1));
  }
  pp->entries_.resize(16);
  Status st = pp->RegisterBuffers();
  if (st.ok()) st = pp->PostCtrlRecv();
  if (!st.ok()) return st;
  return pp;
}

RawFabricPingPong::~RawFabricPingPong() = default;  // the endpoint cancels

// Every buffer is registered once, before anything is timed, as a real
// user of RDMA does (and as ferry's bench side does with reg()).
Status RawFabricPingPong::RegisterBuffers() {
  auto ctrl = Buffer::Allocate(2 * kCtrlSize, 0);
  if (!ctrl.ok()) return ctrl.status();
  ctrl_ = std::move(ctrl).value();
  auto r = endpoint_->Register(ctrl_->data(), ctrl_->size());
  if (!r.ok()) return r.status();
  ctrl_region_ = r.value();
  // The buffer this side sends from: the client's send, the peer's reply.
  if (Buffer* out = buffers_->send ? buffers_->send.get() : buffers_->reply.get()) {
    r = endpoint_->Register(out->data(), out->size());
    if (!r.ok()) return r.status();
    send_region_ = r.value();
  }
  for (const auto& b : buffers_->recv) {
    r = endpoint_->Register(b->data(), b->size());
    if (!r.ok()) return r.status();
    recv_regions_.push_back(r.value());
  }
  if (!buffers_->send && !rma_) {
    // The peer on the msg path: a second landing buffer, so the receive for
    // the next message is posted before this one's echo leaves.
    auto spare = Buffer::Allocate(buffers_->recv[0]->size(), 0);
    if (!spare.ok()) return spare.status();
    spare_ = std::move(spare).value();
    r = endpoint_->Register(spare_->data(), spare_->size());
    if (!r.ok()) return r.status();
    spare_region_ = r.value();
    landing_[0] = {buffers_->recv[0]->data(), buffers_->recv[0]->size(),
                   recv_regions_[0].desc};
    landing_[1] = {spare_->data(), spare_->size(), spare_region_.desc};
  }
  return Status();
}

std::string RawFabricPingPong::address() const {
  return ToHex(endpoint_->name());
}

RawFabricPingPong::Op* RawFabricPingPong::NewOp(OpKind kind) {
  if (free_ops_.empty()) return nullptr;
  Op* op = &ops_[free_ops_.back()];
  free_ops_.pop_back();
  op->kind = kind;
  return op;
}

Status RawFabricPingPong::Progress() {
  auto n = endpoint_->Poll(entries_.data(), entries_.size());
  if (!n.ok()) return n.status();
  for (size_t i = 0; i < n.value(); ++i) {
    const fi_cq_data_entry& e = entries_[i];
    if (e.flags & FI_REMOTE_WRITE) {
      ++arrivals_;  // a peer's fi_writedata landed (its CQ data is the mark)
      continue;
    }
    Op* op = static_cast<Op*>(e.op_context);
    if (op == nullptr) continue;
    switch (op->kind) {
      case OpKind::kSend:
        ++sends_done_;
        break;
      case OpKind::kDataRecv:
        ++data_recvs_done_;
        break;
      case OpKind::kCtrlRecv: {
        ctrl_inbox_.emplace_back(reinterpret_cast<const char*>(ctrl_->data()), e.len);
        free_ops_.push_back(static_cast<uint32_t>(op - ops_.data()));
        Status st = PostCtrlRecv();
        if (!st.ok()) return st;
        continue;
      }
    }
    free_ops_.push_back(static_cast<uint32_t>(op - ops_.data()));
  }
  return Status();
}

template <typename Done>
Status RawFabricPingPong::WaitFor(Done done) {
  while (!done()) {
    Status st = Progress();
    if (!st.ok()) return st;
  }
  return Status();
}

StatusOr<std::string> RawFabricPingPong::NextCtrl(int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (ctrl_inbox_.empty()) {
    if (Clock::now() > deadline) {
      return Status(FERRY_DEADLINE_EXCEEDED,
                    "raw fabric: no set-up message from the other side "
                    "within " +
                        std::to_string(timeout_ms) + " ms");
    }
    Status st = Progress();
    if (!st.ok()) return st;
  }
  std::string msg = std::move(ctrl_inbox_.front());
  ctrl_inbox_.pop_front();
  return msg;
}

Status RawFabricPingPong::PostCtrlRecv() {
  Op* op = NewOp(OpKind::kCtrlRecv);
  if (op == nullptr) return Status(FERRY_INTERNAL, "raw fabric: no free op");
  for (;;) {
    const ssize_t rc = fi_trecv(endpoint_->ep(), ctrl_->data(), kCtrlSize,
                                ctrl_region_.desc, FI_ADDR_UNSPEC, kCtrlTag, 0, &op->ctx);
    if (rc == 0) return Status();
    if (rc != -FI_EAGAIN) return endpoint_->Error("fi_trecv", rc);
    // Progress() re-posts this receive only when it completes, and it is
    // not posted yet: no recursion.
    Status st = Progress();
    if (!st.ok()) return st;
  }
}

Status RawFabricPingPong::SendCtrl(const std::string& bytes, bool wait) {
  if (bytes.size() > kCtrlSize) {
    return Status(FERRY_INVALID_ARGUMENT, "raw fabric: set-up message too big");
  }
  uint8_t* out = ctrl_->data() + kCtrlSize;
  std::memcpy(out, bytes.data(), bytes.size());
  Status st;
  for (;;) {
    Op* op = NewOp(OpKind::kSend);
    if (op == nullptr) {
      st = Progress();
      if (!st.ok()) return st;
      continue;
    }
    const ssize_t rc = fi_tsend(endpoint_->ep(), out, bytes.size(), ctrl_region_.desc,
                                peer_, kCtrlTag, &op->ctx);
    if (rc == 0) break;
    free_ops_.push_back(static_cast<uint32_t>(op - ops_.data()));
    if (rc != -FI_EAGAIN) return endpoint_->Error("fi_tsend", rc);
    st = Progress();
    if (!st.ok()) return st;
  }
  ++sends_posted_;
  // The send half is reused by the next control message: whoever sends one
  // next waits for this one first (every path does, through WaitSendsDone).
  return wait ? WaitSendsDone() : Status();
}

Status RawFabricPingPong::Accept(int timeout_ms) {
  auto hello = NextCtrl(timeout_ms);
  if (!hello.ok()) return hello.status();
  std::string name;
  std::vector<RawFabricRegion> client_regions;
  if (!DecodeSetup(hello.value(), &name, &client_regions) || client_regions.empty()) {
    return Status(FERRY_DATA_LOSS, "raw fabric: malformed hello");
  }
  auto addr = endpoint_->InsertPeer(name);
  if (!addr.ok()) return addr.status();
  peer_ = addr.value();
  peer_regions_ = std::move(client_regions);
  Status st = SendCtrl(EncodeSetup("", recv_regions_));
  if (!st.ok()) return st;
  if (!rma_) st = PostLandingRecv();  // the first message's receive
  return st;
}

Status RawFabricPingPong::Connect(const std::string& address) {
  std::string name;
  if (!FromHex(address, &name) || name.empty()) {
    return Status(FERRY_INVALID_ARGUMENT,
                  "raw fabric: bad peer address '" + address + "'");
  }
  auto addr = endpoint_->InsertPeer(name);
  if (!addr.ok()) return addr.status();
  peer_ = addr.value();
  return SendCtrl(EncodeSetup(endpoint_->name(), {recv_regions_[0]}),
                  /*wait=*/false);
}

Status RawFabricPingPong::AwaitWelcome() {
  if (!peer_regions_.empty()) return Status();
  Status st = WaitSendsDone();  // the hello
  if (!st.ok()) return st;
  auto welcome = NextCtrl(kWelcomeTimeoutMs);
  if (!welcome.ok()) return welcome.status();
  std::string ignored;
  if (!DecodeSetup(welcome.value(), &ignored, &peer_regions_) || peer_regions_.empty()) {
    return Status(FERRY_DATA_LOSS, "raw fabric: malformed answer to hello");
  }
  return Status();
}

Status RawFabricPingPong::PostData(const uint8_t* data, uint64_t size, void* desc,
                                   const RawFabricRegion& target) {
  fid_ep* ep = endpoint_->ep();
  // Up to inject_size the provider copies the bytes at once and reports no
  // completion (fi_pingpong does the same); beyond, one operation with one.
  const bool inject = size <= endpoint_->inject_size();
  for (;;) {
    ssize_t rc;
    Op* op = nullptr;
    if (inject) {
      rc = rma_ ? fi_inject_writedata(ep, data, size, kRemoteData, peer_,
                                      target.remote_addr, target.key)
                : fi_tinject(ep, data, size, peer_, kDataTag);
    } else {
      op = NewOp(OpKind::kSend);
      if (op == nullptr) {
        rc = -FI_EAGAIN;
      } else {
        rc = rma_ ? fi_writedata(ep, data, size, desc, kRemoteData, peer_,
                                 target.remote_addr, target.key, &op->ctx)
                  : fi_tsend(ep, data, size, desc, peer_, kDataTag, &op->ctx);
      }
    }
    if (rc == 0) {
      if (!inject) ++sends_posted_;
      return Status();
    }
    if (op != nullptr) free_ops_.push_back(static_cast<uint32_t>(op - ops_.data()));
    if (rc != -FI_EAGAIN) {
      return endpoint_->Error(rma_ ? "fi_writedata" : "fi_tsend", rc);
    }
    Status st = Progress();  // queue full: make progress, then post again
    if (!st.ok()) return st;
  }
}

Status RawFabricPingPong::PostDataRecv(uint8_t* data, uint64_t capacity, void* desc) {
  for (;;) {
    Op* op = NewOp(OpKind::kDataRecv);
    ssize_t rc = -FI_EAGAIN;
    if (op != nullptr) {
      rc = fi_trecv(endpoint_->ep(), data, capacity, desc, FI_ADDR_UNSPEC, kDataTag, 0,
                    &op->ctx);
      if (rc == 0) {
        ++data_recvs_posted_;
        return Status();
      }
      free_ops_.push_back(static_cast<uint32_t>(op - ops_.data()));
      if (rc != -FI_EAGAIN) return endpoint_->Error("fi_trecv", rc);
    }
    Status st = Progress();
    if (!st.ok()) return st;
  }
}

Status RawFabricPingPong::PostLandingRecv() {
  const Landing& l = landing_[next_landing_];
  next_landing_ ^= 1;
  return PostDataRecv(l.data, l.capacity, l.desc);
}

Status RawFabricPingPong::WaitSendsDone() {
  return WaitFor([this] { return sends_done_ == sends_posted_; });
}

Status RawFabricPingPong::Flush() {
  return WaitSendsDone();
}

Status RawFabricPingPong::RoundTrip(uint64_t size) {
  Status st = AwaitWelcome();
  if (!st.ok()) return st;
  if (rma_) {
    st = PostData(buffers_->send->data(), size, send_region_.desc, peer_regions_[0]);
    if (st.ok()) {
      st = WaitFor([this] { return arrivals_ > arrivals_consumed_; });
    }
    ++arrivals_consumed_;
  } else {
    // The echo's receive first, so it never arrives unexpected.
    st = PostDataRecv(buffers_->recv[0]->data(), buffers_->recv[0]->size(),
                      recv_regions_[0].desc);
    if (st.ok()) {
      st = PostData(buffers_->send->data(), size, send_region_.desc, RawFabricRegion());
    }
    if (st.ok()) {
      st = WaitFor([this] { return data_recvs_done_ == data_recvs_posted_; });
    }
  }
  // Like ferry's round trip: over when the send buffer is free again too.
  if (st.ok()) st = WaitSendsDone();
  return st;
}

Status RawFabricPingPong::Echo(uint64_t size) {
  if (rma_) {
    Status st = WaitFor([this] { return arrivals_ > arrivals_consumed_; });
    if (!st.ok()) return st;
    ++arrivals_consumed_;
    // The client wrote into recv[0]; the reply comes from this side's own.
    return PostData(buffers_->reply->data(), size, send_region_.desc, peer_regions_[0]);
  }
  Status st = WaitFor([this] { return data_recvs_done_ == data_recvs_posted_; });
  if (!st.ok()) return st;
  // The previous reply has long left (the client sent this message after
  // receiving it); its operation is reaped before the next is posted.
  st = WaitSendsDone();
  if (st.ok()) st = PostLandingRecv();
  if (!st.ok()) return st;
  return PostData(buffers_->reply->data(), size, send_region_.desc, RawFabricRegion());
}

Status RawFabricPingPong::Stream(uint64_t size, uint32_t count, uint32_t window) {
  Status welcomed = AwaitWelcome();
  if (!welcomed.ok()) return welcomed;
  const size_t ring = peer_regions_.size();
  const uint64_t base_done = sends_done_;
  const uint64_t base_posted = sends_posted_;
  const bool inject = size <= endpoint_->inject_size();
  for (uint32_t i = 0; i < count; ++i) {
    if (!inject) {
      Status st = WaitFor([&] {
        return (sends_posted_ - base_posted) - (sends_done_ - base_done) < window;
      });
      if (!st.ok()) return st;
    }
    Status st = PostData(buffers_->send->data(), size, send_region_.desc,
                         peer_regions_[rma_ ? i % ring : 0]);
    if (!st.ok()) return st;
  }
  Status st = WaitSendsDone();
  if (!st.ok()) return st;
  auto ack = NextCtrl(30000);
  return ack.ok() ? Status() : ack.status();
}

Status RawFabricPingPong::StreamSink(uint64_t size, uint32_t count, uint32_t window) {
  (void)size;
  Status st;
  if (rma_) {
    const uint64_t target = arrivals_consumed_ + count;
    st = WaitFor([&] { return arrivals_ >= target; });
    arrivals_consumed_ = target;
  } else {
    // One receive is already posted ahead (a landing buffer); keep up to
    // `ring` more posted into the ring while the burst comes in. The ring is
    // a landing zone: streamed bytes are not checked.
    const size_t ring = std::min<size_t>(window, buffers_->recv.size());
    const uint64_t target = data_recvs_done_ + count;
    uint64_t to_post = count - 1;  // the posted-ahead one takes the first
    uint32_t slot = 0;
    while (st.ok() && data_recvs_done_ < target) {
      while (to_post > 0 && data_recvs_posted_ - data_recvs_done_ < ring + 1) {
        st = PostDataRecv(buffers_->recv[slot]->data(), buffers_->recv[slot]->size(),
                          recv_regions_[slot].desc);
        if (!st.ok()) return st;
        slot = static_cast<uint32_t>((slot + 1) % ring);
        --to_post;
      }
      st = Progress();
    }
    if (st.ok()) st = WaitSendsDone();
    if (st.ok()) st = PostLandingRecv();  // for whatever comes next
  }
  if (!st.ok()) return st;
  return SendCtrl(std::string(1, '\1'));
}

}  // namespace ferry::bench
