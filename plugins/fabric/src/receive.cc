// The receive side: pre-posted receive buffers, frame dispatch, MSG parsing,
// per-connection ordering and ARRIVAL events (answers: answer.cc).
//
// Receive buffers: rx_buffers of them, of which only rx_posted (32) are
// posted at a time; the rest wait on a stack. Providers fill posted
// receives in the order they were posted, so every posted buffer is used in
// turn: with all of them posted, a ping-pong would touch a new 16 KiB buffer
// (a new page) per message, and after another process had the CPU its next
// few hundred round trips would each pay cache and TLB misses. Few posted,
// and the most recently used posted again first, keep the buffers a steady
// exchange touches in cache and in the TLB. A burst beyond the window waits
// in the provider (unexpected messages) until progress() posts more.
//
// Receiver-not-ready: a buffer stays with its message until the host
// answers, and goes back after. When the host holds most of the pool (many
// arrivals), new messages are copied out ("spilled", bounded by
// max_spill_bytes) so their buffers go straight back; beyond that bound the
// provider's own flow control holds senders back (FI_RM_ENABLED).
// Messages are held back per connection until the previous arrival is
// answered, which keeps order and gives the host back-pressure.
#include "context.h"

#include "fi_error.h"
#include "msg_parse.h"

#include "ferry_plugin/log.h"

#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstring>

namespace ferry_fabric {

bool Context::TryPostRecv(RxBuf* b) {
  ssize_t rc = fi_recv(endpoint_->ep(), b->data, rx_pool_.size(), b->desc, FI_ADDR_UNSPEC,
                       AsContext(b));
  if (rc == 0) {
    b->posted = true;
    ++rx_posted_;
    return true;
  }
  if (rc != -FI_EAGAIN) {
    FERRY_PLUGIN_LOG(FERRY_LOG_WARN, "posting a receive buffer: %s (will retry)",
                     FiText("fi_recv", static_cast<int>(rc), provider_).c_str());
  }
  return false;
}

void Context::PostRecv(RxBuf* b) {
  if (!TryPostRecv(b)) rx_idle_.push_back(b);
}

void Context::RepostRx() {
  while (RxWantsBuffers() && TryPostRecv(rx_idle_.back())) rx_idle_.pop_back();
}

void Context::ReturnRxBuf(RxBuf* b) {
  // fi_recv is a third of a small message's libfabric work on the shm
  // provider (~300 instructions). Answering an arrival is on the latency
  // path (the host's reply follows it); the next progress() is not (it
  // spins while the reply travels). So the buffer is posted there, unless
  // fewer than half the window is posted.
  if (rx_posted_ < rx_window_ / 2) {
    PostRecv(b);
  } else {
    rx_idle_.push_back(b);
  }
}

void Context::OnRecv(RxBuf* b, size_t len) {
  b->posted = false;
  --rx_posted_;
  wire::Head h;
  if (!wire::Read(b->data, len, &h)) {
    FERRY_PLUGIN_LOG(FERRY_LOG_WARN, "dropping a %zu-byte frame: too short", len);
  } else if (h.version != wire::kVersion) {
    FERRY_PLUGIN_LOG(FERRY_LOG_WARN,
                     "dropping a frame of wire version %u (this plugin speaks %u): a "
                     "peer runs another ferry-fabric version",
                     h.version, wire::kVersion);
  } else {
    switch (h.type) {
      case wire::kMsg:
        if (OnMsg(b, len)) return;  // the message keeps the buffer
        break;
      case wire::kData:
        OnData(b->data, len);
        break;
      case wire::kFin:
        OnFin(b->data, len);
        break;
      case wire::kCts:
        OnCts(b->data, len);
        break;
      case wire::kConnect:
        OnConnect(b->data, len);
        break;
      case wire::kAccept:
        OnAccept(b->data, len);
        break;
      case wire::kReject:
        OnReject(b->data, len);
        break;
      case wire::kDisconnect:
        OnDisconnect(b->data, len);
        break;
      case wire::kDisconnectAck:
        OnDisconnectAck(b->data, len);
        break;
      default:
        FERRY_PLUGIN_LOG(FERRY_LOG_WARN, "dropping a frame of unknown type %u", h.type);
    }
  }
  ReturnRxBuf(b);
}

// Inlined into its three callers here: the first, TryInlineArrival, is
// every small message's path.
[[gnu::always_inline]] inline void Context::DeliverArrival(Conn* c, RxMsg* m) {
  m->msg_id = c->next_msg_id++;
  c->held = m;
  // Inside progress(), with nothing queued before it: straight into the
  // host's array; otherwise queued.
  ferry_event_t* ev =
      events_.Empty()
          ? host_events_.Take(FERRY_EV_ARRIVAL, reinterpret_cast<ferry_conn_t*>(c),
                              c->user_data)
          : nullptr;
  if (ev == nullptr) ev = &Emit(FERRY_EV_ARRIVAL, c, nullptr);
  ev->msg_id = m->msg_id;
  ev->header = m->header;
  ev->header_len = m->header_len;
  ev->segments = m->segs.empty() ? nullptr : m->segs.data();
  ev->num_segments = static_cast<uint32_t>(m->segs.size());
}

// The latency path of the receive side: an all-inline MSG (no sender
// operation) that is next in order on an open connection with nothing held,
// queued or arrived ahead of it, while the pool is not low enough to spill.
// One read of the fixed part and one pass over the segment table, and the
// ARRIVAL goes out; OnRecv/OnMsg would take the same decisions in five
// calls and three reads of the header. Anything else, valid or not, is left
// to them untouched (false): they word what is wrong with a bad frame.
bool Context::TryInlineArrival(RxBuf* b, size_t len) {
  wire::Msg h;
  if (!wire::Read(b->data, len, &h) || h.head.type != wire::kMsg ||
      h.head.version != wire::kVersion || h.op_id != 0) {
    return false;
  }
  Conn* c = conns_.Find(h.head.dst);
  if (c == nullptr || !c->Open() || c->peer_closed || c->held != nullptr ||
      !c->ready.empty() || !c->early.empty() || h.head.aux != c->expected_seq ||
      Spilling(rx_posted_ - 1)) {  // b still counts as posted here
    return false;
  }
  RxMsg* m = NewRxMsg();
  if (ParseInlineMsg(b->data, len, h, config_.max_segments, m) != nullptr) {
    ReleaseRxMsg(m);
    return false;
  }
  b->posted = false;
  --rx_posted_;
  m->buf = b;
  ++c->expected_seq;
  DeliverArrival(c, m);
  return true;
}

bool Context::OnMsg(RxBuf* b, size_t len) {
  wire::Msg h;
  if (!wire::Read(b->data, len, &h)) {
    // Too short to name its connection: nobody's message to break.
    FERRY_PLUGIN_LOG(FERRY_LOG_WARN,
                     "dropping a %zu-byte MSG frame: shorter than its fixed part", len);
    return false;
  }
  Conn* c = conns_.Find(h.head.dst);
  if (c == nullptr || c->close_called) return false;  // closed: dropped
  if (c->state == Conn::State::kBroken && !c->peer_closed) return false;
  const uint32_t seq = h.head.aux;
  const int32_t ahead = static_cast<int32_t>(seq - c->expected_seq);
  if (ahead < 0 || (ahead > 0 && c->early.count(seq) != 0)) {
    FERRY_PLUGIN_LOG(FERRY_LOG_WARN, "dropping a duplicate message (seq %u)", seq);
    return false;
  }
  RxMsg* m = NewRxMsg();
  const char* frame = b->data;
  bool keep = true;
  if (Spilling(rx_posted_) && spill_bytes_ + len <= config_.max_spill_bytes) {
    m->spill.assign(b->data, b->data + len);
    spill_bytes_ += len;
    frame = m->spill.data();
    keep = false;
  } else {
    m->buf = b;
  }
  Status st = ParseMsg(frame, len, config_.max_segments, rma_, m);
  if (!st.ok()) {
    m->buf = nullptr;  // the caller reposts it
    ReleaseRxMsg(m);
    Break(c, FERRY_DATA_LOSS, st.message);
    return false;
  }
  if (ahead > 0) {
    c->early.emplace(seq, m);
    TryDeliver(c);
    return keep;
  }
  ++c->expected_seq;
  if (c->ready.empty() && c->held == nullptr && c->state != Conn::State::kConnecting) {
    // The usual case (in order, nothing waiting before it): delivered now,
    // without a trip through the ready queue.
    DeliverArrival(c, m);
    if (!c->early.empty()) TakeEarlyInOrder(c);
    if (c->peer_closed) MaybeFinishPeerClose(c);
  } else {
    c->ready.push_back(m);
    TakeEarlyInOrder(c);
    TryDeliver(c);
  }
  return keep;
}

void Context::TakeEarlyInOrder(Conn* c) {
  for (auto it = c->early.find(c->expected_seq); it != c->early.end();
       it = c->early.find(c->expected_seq)) {
    c->ready.push_back(it->second);
    c->early.erase(it);
    ++c->expected_seq;
  }
}

RxMsg* Context::AddRxMsg() {
  rx_msg_store_.push_back(std::make_unique<RxMsg>());
  return rx_msg_store_.back().get();
}

void Context::ReleaseRxMsg(RxMsg* m) {
  if (m->buf != nullptr) {
    ReturnRxBuf(m->buf);
    m->buf = nullptr;
  } else if (!m->spill.empty()) {
    spill_bytes_ -= m->spill.size();
    m->spill.clear();
  }
  m->header = nullptr;
  m->header_len = 0;
  m->msg_id = 0;
  m->next = free_rx_msgs_;
  free_rx_msgs_ = m;
}

void Context::TryDeliver(Conn* c) {
  if (c->close_called || c->held != nullptr || c->state == Conn::State::kConnecting) {
    return;
  }
  if (!c->ready.empty()) {
    RxMsg* m = c->ready.front();
    c->ready.pop_front();
    DeliverArrival(c, m);
  }
  MaybeFinishPeerClose(c);
}

void Context::MaybeFinishPeerClose(Conn* c) {
  if (c->peer_closed && c->state == Conn::State::kOpen && !c->close_called &&
      c->expected_seq == c->peer_final_seq && c->ready.empty()) {
    Break(c, FERRY_PEER_GONE, "fabric: the peer closed the connection");
  }
}

void Context::DropReceived(Conn* c) {
  if (c->held != nullptr) {
    // An ARRIVAL not yet returned can no longer be answered: queued, or
    // written into the host's array by the progress() running now.
    events_.ForEachQueued([c](QueuedEvent& e) {
      if (e.owner == c && e.type == FERRY_EV_ARRIVAL) e.suppressed = true;
    });
    host_events_.Retract([c](const ferry_event_t& e) {
      return e.type == FERRY_EV_ARRIVAL && e.conn == reinterpret_cast<ferry_conn_t*>(c);
    });
    ReleaseRxMsg(c->held);
    c->held = nullptr;
  }
  for (RxMsg* m : c->ready) ReleaseRxMsg(m);
  c->ready.clear();
  for (auto& [seq, m] : c->early) ReleaseRxMsg(m);
  c->early.clear();
}

}  // namespace ferry_fabric
