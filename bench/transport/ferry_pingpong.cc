#include "transport/ferry_pingpong.h"

#include "loader/host_services.h"

#include <poll.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

namespace ferry::bench {
namespace {

// The benchmark's message header: the fields a minimal RPC header carries
// (an id to match the reply, a length to check it).
struct WireHeader {
  uint64_t seq;
  uint64_t length;
};
constexpr uint64_t kAckSeq = ~0ull;  // the streaming test's acknowledgement
constexpr uint64_t kEndSeq = ~1ull;  // EndRun's mark
constexpr ferry_device_t kCpu = {FERRY_DEVICE_CPU, 0};

using Clock = std::chrono::steady_clock;

Status Deadline(const char* what, int timeout_ms) {
  return Status(FERRY_DEADLINE_EXCEEDED, std::string("ferry: ") + what +
                                             " did not happen within " +
                                             std::to_string(timeout_ms) + " ms");
}

}  // namespace

StatusOr<std::unique_ptr<FerryPingPong>> FerryPingPong::Open(
    std::shared_ptr<const Plugin> plugin, PollMode mode, BufferSet* buffers) {
  const bool busy = mode == PollMode::kBusy;
  // The in-process setting wins over FERRY_<PLUGIN>_BUSY_POLL: the report's
  // mode label must be what actually ran.
  SetPluginParam(plugin->name(), "busy_poll", busy ? "1" : "0");
  // Sleep mode means each side blocks as soon as it has nothing to do, as
  // every reference does; a plugin that would spin first in its adaptive
  // mode (shm's spin_us) is told not to, or a 64-byte "sleeping" round trip
  // would be a spinning one. Plugins without the parameter never read it.
  if (!busy) SetPluginParam(plugin->name(), "spin_us", "0");
  auto transport = Transport::Open(std::move(plugin), busy ? FERRY_INIT_BUSY_POLL : 0u,
                                   busy ? "bench-busy" : "bench-sleep");
  if (!transport.ok()) return transport.status();
  std::unique_ptr<FerryPingPong> pp(
      new FerryPingPong(std::move(transport).value(), mode, buffers));
  Status st = pp->RegisterBuffers();
  if (!st.ok()) return st;
  return pp;
}

FerryPingPong::FerryPingPong(std::unique_ptr<Transport> transport, PollMode mode,
                             BufferSet* buffers)
    : transport_(std::move(transport)),
      mode_(mode),
      buffers_(buffers),
      slot_busy_(buffers->recv.size(), 0) {}

FerryPingPong::~FerryPingPong() {
  if (conn_ != nullptr && !closed_) (void)Close(2000);
  if (listener_ != nullptr) transport_->CloseListener(listener_);
  if (send_mr_ != nullptr) transport_->Dereg(send_mr_);
  for (ferry_mr_t* mr : recv_mr_) {
    if (mr != nullptr) transport_->Dereg(mr);
  }
  // transport_'s destructor calls fini().
}

// A core's buffer pools register once, up front; so does the benchmark.
// Without reg() in the vtable, segments simply carry no handle.
Status FerryPingPong::RegisterBuffers() {
  if (!transport_->Has(FERRY_VT(reg))) return Status();
  auto reg = [&](Buffer* b, uint32_t access, ferry_mr_t** out) -> Status {
    ferry_reg_args_t args{};
    args.struct_size = sizeof args;
    args.access = access;
    args.data = b->data();
    args.length = b->size();
    args.device = kCpu;
    return transport_->Reg(args, out);
  };
  // The buffer this side sends from: the client's send, the peer's reply.
  if (Buffer* out = buffers_->send ? buffers_->send.get() : buffers_->reply.get()) {
    Status st = reg(out, FERRY_ACCESS_SEND, &send_mr_);
    if (st.code() == FERRY_UNIMPLEMENTED) return Status();
    if (!st.ok()) return st;
  }
  recv_mr_.assign(buffers_->recv.size(), nullptr);
  for (size_t i = 0; i < buffers_->recv.size(); ++i) {
    Status st = reg(buffers_->recv[i].get(), FERRY_ACCESS_RECV, &recv_mr_[i]);
    if (st.code() == FERRY_UNIMPLEMENTED) {
      recv_mr_.clear();
      return Status();
    }
    if (!st.ok()) return st;
  }
  return Status();
}

StatusOr<std::string> FerryPingPong::Listen(const std::string& address) {
  Status st = transport_->Listen(address, this, &listener_);
  if (!st.ok()) return st;
  return transport_->ListenerAddress(listener_);
}

Status FerryPingPong::Accept(int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (conn_ == nullptr) {
    if (Clock::now() > deadline) return Deadline("accept", timeout_ms);
    Status st = Poll();
    if (!st.ok()) return st;
  }
  transport_->CloseListener(listener_);
  listener_ = nullptr;
  return Status();
}

Status FerryPingPong::Connect(const std::string& address, int timeout_ms) {
  Status st = transport_->Connect(address, this, &conn_);
  if (!st.ok()) return st;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!connected_) {
    if (Clock::now() > deadline) return Deadline("connect", timeout_ms);
    st = Poll();
    if (!st.ok()) return st;
  }
  return Status();
}

Status FerryPingPong::Close(int timeout_ms) {
  if (conn_ == nullptr || closed_) return Status();
  // close() releases an arrival the host still holds (the ABI), so a held
  // echo needs no discard() here, which a broken connection would refuse.
  held_echo_.reset();
  closing_ = true;
  transport_->Close(conn_);
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!closed_) {
    if (Clock::now() > deadline) return Deadline("FERRY_EV_CLOSED", timeout_ms);
    Status st = Poll();
    if (!st.ok()) return st;
  }
  conn_ = nullptr;
  return Status();
}

Status FerryPingPong::BrokenError() const {
  return Status(broken_.code(), "ferry: connection broken: " + broken_.message());
}

Status FerryPingPong::Poll() {
  uint32_t n = 0;
  ++counters_.calls;
  Status st =
      transport_->Progress(events_.data(), static_cast<uint32_t>(events_.size()), &n);
  if (!st.ok()) return st;
  Status first;
  for (uint32_t i = 0; i < n; ++i) {
    const ferry_event_t& ev = events_[i];
    // Every message's two events, taken here without a Status each: the
    // round trip the benchmark times runs through this loop.
    if (ev.type == FERRY_EV_SEND_DONE && ev.status == FERRY_OK) {
      ++sends_done_;
      continue;
    }
    if (ev.type == FERRY_EV_ARRIVAL && TakeArrival(ev)) continue;
    Status h = Handle(ev);
    if (first.ok() && !h.ok()) first = h;
  }
  if (!first.ok()) return first;
  if (n == 0 && mode_ == PollMode::kSleep) {
    Sleep();
  } else {
    backoff_.Reset();
  }
  return Status();
}

void FerryPingPong::Sleep() {
  const int fd = transport_->info().wakeup_fd;
  if (fd >= 0) {
    // Level-triggered: readable whenever progress() has something to do.
    // The timeout only bounds a plugin that forgot to signal.
    ++counters_.waits;
    pollfd p{fd, POLLIN, 0};
    (void)poll(&p, 1, 1000);
    return;
  }
  backoff_.Wait(&counters_);  // no wait object
}

Status FerryPingPong::Handle(const ferry_event_t& ev) {
  switch (ev.type) {
    case FERRY_EV_ACCEPTED:
      if (conn_ != nullptr) {  // only one client is expected
        transport_->Close(ev.conn);
        return Status();
      }
      conn_ = ev.conn;
      transport_->SetConnUserData(conn_, this);
      return Status();
    case FERRY_EV_CONNECTED:
      if (ev.status != FERRY_OK) {
        return Status(ev.status, std::string("ferry: connect failed: ") +
                                     (ev.message ? ev.message : ""));
      }
      connected_ = true;
      return Status();
    case FERRY_EV_SEND_DONE:
      ++sends_done_;
      if (ev.status != FERRY_OK && !closing_) {
        return Status(ev.status, std::string("ferry: send failed: ") +
                                     (ev.message ? ev.message : ""));
      }
      return Status();
    case FERRY_EV_ARRIVAL: {  // one that TakeArrival refused: say why
      Arrival a;
      uint64_t said = 0;
      switch (ReadArrival(ev, &a, &said)) {
        case ArrivalFault::kShortHeader:
          return Status(FERRY_DATA_LOSS, "ferry: arrival with a " +
                                             std::to_string(ev.header_len) +
                                             "-byte header, expected " +
                                             std::to_string(sizeof(WireHeader)));
        case ArrivalFault::kLengthMismatch:
          return Status(FERRY_DATA_LOSS, "ferry: header says " + std::to_string(said) +
                                             " bytes, the segment has " +
                                             std::to_string(a.length));
        case ArrivalFault::kNone:
          break;
      }
      arrivals_.push_back(a);
      return Status();
    }
    case FERRY_EV_PLACE_DONE: {
      const auto slot = reinterpret_cast<uintptr_t>(ev.user_data);
      if (slot < slot_busy_.size()) slot_busy_[slot] = 0;
      if (ev.status != FERRY_OK && !closing_) {
        return Status(ev.status, std::string("ferry: place failed: ") +
                                     (ev.message ? ev.message : ""));
      }
      return Status();
    }
    case FERRY_EV_CONN_BROKEN:
      // Recorded, not returned: events delivered before it in the same batch
      // (the last echo's PLACE_DONE) still count. Wait loops check it when
      // what they wait for has not happened.
      broken_ = Status(ev.status == FERRY_OK ? FERRY_PEER_GONE : ev.status,
                       ev.message ? ev.message : "connection broken");
      return Status();
    case FERRY_EV_CLOSED:
      if (ev.conn == conn_) closed_ = true;
      return Status();
    default:
      return Status();  // events of a newer minor: not ours to interpret
  }
}

FerryPingPong::ArrivalFault FerryPingPong::ReadArrival(const ferry_event_t& ev,
                                                       Arrival* a,
                                                       uint64_t* said_length) {
  a->msg_id = ev.msg_id;
  a->num_segments = ev.num_segments;
  if (ev.header_len < sizeof(WireHeader) || ev.header == nullptr) {
    return ArrivalFault::kShortHeader;
  }
  WireHeader h;
  std::memcpy(&h, ev.header, sizeof h);
  a->seq = h.seq;
  if (ev.num_segments >= 1) {
    const auto* seg = FERRY_ELEMENT_AT(const ferry_arrival_segment_t, ev.segments,
                                       ev.segment_stride, 0);
    a->length = seg->length;
    a->inline_data = seg->inline_data;
  }
  *said_length = h.length;
  return a->length == h.length ? ArrivalFault::kNone : ArrivalFault::kLengthMismatch;
}

bool FerryPingPong::TakeArrival(const ferry_event_t& ev) {
  Arrival a;
  uint64_t said = 0;
  if (ReadArrival(ev, &a, &said) != ArrivalFault::kNone) return false;
  arrivals_.push_back(a);
  return true;
}

Status FerryPingPong::PostSend(uint64_t seq, const uint8_t* data, uint64_t size,
                               ferry_mr_t* mr) {
  const WireHeader h{seq, size};
  ferry_segment_t seg{};
  seg.struct_size = sizeof seg;
  seg.data = data;
  seg.length = size;
  seg.device = kCpu;
  seg.mr = mr;
  ferry_send_args_t args{};
  args.struct_size = sizeof args;
  args.num_segments = size > 0 ? 1 : 0;
  args.header = &h;
  args.header_len = sizeof h;
  args.segments = size > 0 ? &seg : nullptr;
  args.segment_stride = sizeof seg;
  args.user_data = nullptr;
  Status st = transport_->Send(conn_, args);
  if (st.ok()) ++sends_posted_;
  return st;
}

Status FerryPingPong::SendRetrying(uint64_t seq, const uint8_t* data, uint64_t size,
                                   ferry_mr_t* mr) {
  for (;;) {
    Status st = PostSend(seq, data, size, mr);
    if (st.code() != FERRY_UNAVAILABLE) return st;
    st = Poll();  // back-pressure: make progress, then post again
    if (!st.ok()) return st;
  }
}

Status FerryPingPong::WaitArrival(Arrival* out) {
  while (arrivals_head_ == arrivals_.size()) {
    if (!broken_.ok()) return BrokenError();
    Status st = Poll();
    if (!st.ok()) return st;
  }
  *out = arrivals_[arrivals_head_++];
  if (arrivals_head_ == arrivals_.size()) {  // drained: start over
    arrivals_.clear();
    arrivals_head_ = 0;
  }
  return Status();
}

Status FerryPingPong::CheckFits(const Arrival& a, uint32_t slot) const {
  if (a.num_segments != 1 || a.length > buffers_->recv[slot]->size()) {
    return Status(FERRY_DATA_LOSS,
                  "ferry: unexpected arrival: " + std::to_string(a.num_segments) +
                      " segments, " + std::to_string(a.length) + " bytes");
  }
  return Status();
}

Status FerryPingPong::CopyInline(const Arrival& a, uint32_t slot) {
  // The usual case tested first, without building a Status: every eager
  // round trip the benchmark times comes through here.
  if (!FitsInline(a, slot)) return CheckFits(a, slot);  // words what is wrong
  std::memcpy(buffers_->recv[slot]->data(), a.inline_data, a.length);
  return Status();
}

Status FerryPingPong::Receive(const Arrival& a, uint32_t slot, bool* done) {
  Buffer* dest = buffers_->recv[slot].get();
  if (a.inline_data != nullptr) {
    // Eager path: the bytes are already here; the host copies them and
    // releases the arrival with discard().
    Status st = CopyInline(a, slot);
    if (!st.ok()) return st;
    *done = true;
    return transport_->Discard(conn_, a.msg_id);
  }
  Status fits = CheckFits(a, slot);
  if (!fits.ok()) return fits;
  ferry_place_dest_t d{};
  d.struct_size = sizeof d;
  d.data = dest->data();
  d.capacity = dest->size();
  d.device = kCpu;
  d.mr = recv_mr_.empty() ? nullptr : recv_mr_[slot];
  ferry_place_args_t args{};
  args.struct_size = sizeof args;
  args.num_dests = 1;
  args.msg_id = a.msg_id;
  args.dests = &d;
  args.dest_stride = sizeof d;
  args.user_data = reinterpret_cast<void*>(static_cast<uintptr_t>(slot));
  slot_busy_[slot] = 1;
  Status st = transport_->Place(conn_, args);
  if (!st.ok()) slot_busy_[slot] = 0;
  *done = false;
  return st;
}

Status FerryPingPong::WaitSlotFree(uint32_t slot) {
  while (slot_busy_[slot]) {
    Status st = CheckConn();
    if (st.ok()) st = Poll();
    if (!st.ok()) return st;
  }
  return Status();
}

Status FerryPingPong::WaitSendsDone() {
  while (sends_done_ < sends_posted_) {
    Status st = CheckConn();
    if (st.ok()) st = Poll();
    if (!st.ok()) return st;
  }
  return Status();
}

Status FerryPingPong::ReleaseHeldEcho() {
  if (!held_echo_) return Status();
  const uint64_t msg_id = *held_echo_;
  held_echo_.reset();
  return transport_->Discard(conn_, msg_id);
}

Status FerryPingPong::RoundTrip(uint64_t size) {
  const uint64_t seq = next_seq_++;
  Status st = SendRetrying(seq, buffers_->send->data(), size, send_mr_);
  // The previous echo is answered now that this request has left (Echo
  // does the same with the request after its reply).
  if (st.ok()) st = ReleaseHeldEcho();
  if (!st.ok()) return st;
  Arrival a;
  st = WaitArrival(&a);
  if (!st.ok()) return st;
  if (a.seq != seq || a.length != size) {
    return Status(FERRY_DATA_LOSS, "ferry: expected echo #" + std::to_string(seq) +
                                       " of " + std::to_string(size) + " bytes, got #" +
                                       std::to_string(a.seq) + " of " +
                                       std::to_string(a.length));
  }
  if (a.inline_data != nullptr) {
    // Eager: the echo's bytes are copied into recv[0] now; the arrival is
    // discarded after the next request leaves (ReleaseHeldEcho), so that
    // the discard overlaps that request's flight instead of delaying it.
    st = CopyInline(a, 0);
    if (st.ok()) held_echo_ = a.msg_id;
  } else {
    bool done = false;
    st = Receive(a, 0, &done);
    if (st.ok() && !done) st = WaitSlotFree(0);
  }
  // The round trip ends when the echo is in place and the send buffer is
  // free again (its FERRY_EV_SEND_DONE), as a caller reusing it needs.
  if (st.ok()) st = WaitSendsDone();
  return st;
}

Status FerryPingPong::Echo(uint64_t size) {
  Arrival a;
  Status st = WaitArrival(&a);
  if (!st.ok()) return st;
  if (a.length != size) {
    return Status(FERRY_DATA_LOSS, "ferry: expected " + std::to_string(size) +
                                       " bytes, got " + std::to_string(a.length));
  }
  const uint8_t* reply = buffers_->reply->data();
  if (a.inline_data != nullptr) {
    // Eager: the request is copied into recv[0] before the reply leaves;
    // the arrival is released after, so the discard overlaps the reply's
    // flight instead of delaying it.
    st = CopyInline(a, 0);
    if (st.ok()) st = SendRetrying(a.seq, reply, size, send_mr_);
    if (st.ok()) st = transport_->Discard(conn_, a.msg_id);
    return st;
  }
  bool done = false;
  st = Receive(a, 0, &done);
  if (st.ok() && !done) st = WaitSlotFree(0);
  if (!st.ok()) return st;
  return SendRetrying(a.seq, reply, size, send_mr_);
}

Status FerryPingPong::Stream(uint64_t size, uint32_t count, uint32_t window) {
  Status released = ReleaseHeldEcho();
  if (!released.ok()) return released;
  const uint64_t base = sends_posted_;
  uint32_t posted = 0;
  while (sends_done_ - base < count) {
    while (posted < count && sends_posted_ - sends_done_ < window) {
      Status st = PostSend(next_seq_, buffers_->send->data(), size, send_mr_);
      if (st.code() == FERRY_UNAVAILABLE) break;  // back-pressure
      if (!st.ok()) return st;
      ++next_seq_;
      ++posted;
    }
    Status st = CheckConn();
    if (st.ok()) st = Poll();
    if (!st.ok()) return st;
  }
  Arrival ack;
  Status st = WaitArrival(&ack);
  if (!st.ok()) return st;
  if (ack.seq != kAckSeq || ack.num_segments != 0) {
    return Status(FERRY_DATA_LOSS, "ferry: expected the stream's ack");
  }
  return transport_->Discard(conn_, ack.msg_id);
}

Status FerryPingPong::StreamSink(uint64_t size, uint32_t count, uint32_t window) {
  const uint32_t ring =
      static_cast<uint32_t>(std::min<size_t>(window, buffers_->recv.size()));
  Status st = WaitSendsDone();  // recv[0] may still be lent to an echo
  for (uint32_t i = 0; st.ok() && i < count; ++i) {
    Arrival a;
    st = WaitArrival(&a);
    if (st.ok() && a.length != size) {
      st =
          Status(FERRY_DATA_LOSS, "ferry: stream message of " + std::to_string(a.length) +
                                      " bytes, expected " + std::to_string(size));
    }
    const uint32_t slot = i % ring;
    if (st.ok()) st = WaitSlotFree(slot);
    bool done = false;
    if (st.ok()) st = Receive(a, slot, &done);
  }
  for (uint32_t slot = 0; st.ok() && slot < ring; ++slot) {
    st = WaitSlotFree(slot);
  }
  if (!st.ok()) return st;
  // Header-only acknowledgement: every byte has landed.
  return SendRetrying(kAckSeq, nullptr, 0, nullptr);
}

Status FerryPingPong::EndRun() {
  Status released = ReleaseHeldEcho();
  if (!released.ok()) return released;
  Status st = SendRetrying(kEndSeq, nullptr, 0, nullptr);
  if (st.ok()) st = WaitSendsDone();
  return st;
}

Status FerryPingPong::Flush() {
  Arrival mark;
  Status st = WaitArrival(&mark);  // progress() all along: the last echo leaves
  if (!st.ok()) return st;
  if (mark.seq != kEndSeq || mark.num_segments != 0) {
    return Status(FERRY_DATA_LOSS,
                  "ferry: expected the client's end-of-run mark, got message #" +
                      std::to_string(mark.seq));
  }
  st = transport_->Discard(conn_, mark.msg_id);
  if (st.ok()) st = WaitSendsDone();
  return st;
}

}  // namespace ferry::bench
