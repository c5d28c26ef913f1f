// Transport events (engine.h): accepted connections, arrivals and receive
// placement, completed sends, closed connections. An arrival's header is
// decoded here; its segments land in buffers the message owns (inline bytes
// copied at once, larger ones through place()); the finished message goes to
// the handshake, the store, or — numbered and deduplicated — to the sink.
#include "common/log.h"
#include "engine/connection.h"
#include "engine/engine.h"
#include "engine/handshake_step.h"
#include "engine/peer.h"

#include <cstring>

namespace ferry {
namespace {

constexpr const char* kLog = "engine";

bool IsStoreKind(wire::Kind k) {
  return k == wire::Kind::kStoreJoin || k == wire::Kind::kStoreJoined ||
         k == wire::Kind::kStoreMemberEvent || k == wire::Kind::kStoreLeave ||
         k == wire::Kind::kStoreArrive;
}

// A message whose body travelled as segment 0 (too big for the header):
// the body moves out of the segments.
void TakeBodyFromSegment0(InMessage* msg) {
  AlignedBuffer& b = msg->segments.front();
  const auto* p = static_cast<const uint8_t*>(b.data);
  msg->body.assign(p, p + b.size);
  msg->segments.erase(msg->segments.begin());
}

}  // namespace

void Engine::ProcessEvent(TransportSlot& slot, const ferry_event_t& ev,
                          std::vector<Action>* actions) {
  switch (ev.type) {
    case FERRY_EV_ACCEPTED:
      OnAccepted(slot, ev);
      return;
    case FERRY_EV_SEND_DONE:
      in_flight_.Erase(static_cast<OutMessage*>(ev.user_data));
      delete static_cast<OutMessage*>(ev.user_data);
      return;
    case FERRY_EV_PLACE_DONE:
      OnPlaceDone(ev, actions);
      return;
    default:
      break;
  }
  auto it = slot.by_handle.find(ev.conn);
  if (it == slot.by_handle.end()) return;
  Conn* c = it->second;
  switch (ev.type) {
    case FERRY_EV_CONNECTED:
      OnConnected(c, ev, actions);
      break;
    case FERRY_EV_ARRIVAL:
      // Closed earlier in this same batch: close() released the arrival and
      // its borrowed header and segments with it (transport.h,
      // FERRY_EV_CLOSED). Touch nothing.
      if (c->state != Conn::State::kClosed) OnArrival(c, ev, actions);
      break;
    case FERRY_EV_CONN_BROKEN:
      if (c->state != Conn::State::kClosed && !c->outbound &&
          c->state != Conn::State::kReady) {
        // A stranger's connection the transport dropped (a malformed or
        // oversized frame, say): nobody else hears of it.
        FERRY_LOG(FERRY_LOG_WARN, kLog,
                  "closed the connection from " + c->address +
                      " before its handshake finished: " +
                      (ev.message ? ev.message : "connection lost"));
      }
      if (c->state != Conn::State::kClosed) {
        ConnFailed(c,
                   Status(ev.status == FERRY_OK ? FERRY_PEER_GONE : ev.status,
                          ev.message ? ev.message : "connection lost"),
                   actions);
      }
      break;
    case FERRY_EV_CLOSED:
      slot.by_handle.erase(it);
      conns_.erase(c->id);
      break;
    default:
      break;
  }
}

void Engine::OnPlaceDone(const ferry_event_t& ev, std::vector<Action>* actions) {
  places_in_flight_.erase(ev.user_data);
  std::unique_ptr<PendingPlace> pp(static_cast<PendingPlace*>(ev.user_data));
  Conn* c = FindConn(pp->conn_id);
  if (ev.status != FERRY_OK || c == nullptr || c->state == Conn::State::kClosed) {
    return;  // the connection failed; its CONN_BROKEN tells the rest
  }
  if (pp->body_in_segment0) TakeBodyFromSegment0(pp->msg.get());
  OnMessageComplete(c, std::move(pp->msg), actions);
}

void Engine::OnAccepted(TransportSlot& slot, const ferry_event_t& ev) {
  auto c = std::make_unique<Conn>();
  c->id = next_conn_id_++;
  c->slot = &slot;
  c->handle = ev.conn;
  c->state = Conn::State::kAwaitHello;
  c->started = c->last_heard = Clock::now();
  auto peer = slot.transport->PeerAddress(ev.conn);
  if (peer.ok()) c->address = peer.value();
  slot.by_handle[ev.conn] = c.get();
  ++stats_.connections;
  Conn* accepted = c.get();
  conns_[c->id] = std::move(c);
  RefuseIfOverConnectionLimit(accepted);
}

void Engine::OnArrival(Conn* c, const ferry_event_t& ev, std::vector<Action>* actions) {
  if (!ArrivalWithinLimit(c, ev, actions)) return;
  Transport& t = *c->slot->transport;
  wire::Reader r(ev.header, ev.header_len);
  auto msg = std::make_unique<InMessage>();
  uint8_t version = 0;
  if (!wire::DecodeEnvelope(r, &msg->envelope, &version) ||
      version != wire::kWireVersion) {
    t.Discard(c->handle, ev.msg_id);
    FERRY_LOG(FERRY_LOG_WARN, kLog,
              "dropping a connection from " + c->address +
                  ": not a ferry peer of wire version " +
                  std::to_string(wire::kWireVersion) + " (a " +
                  std::to_string(ev.header_len) + "-byte header, version " +
                  std::to_string(version) + ")");
    ConnFailed(c, Status(FERRY_INCOMPATIBLE, "not a ferry wire-v1 peer"), actions);
    return;
  }
  if (c->outbound && c->state == Conn::State::kAuthSent &&
      !IsHandshake(msg->envelope.kind)) {
    // The acceptor sends nothing but READY before it has checked our AUTH,
    // and it proved it holds the secret in its CHALLENGE: anything else from
    // it means READY is on its way. On a transport without
    // FERRY_CAP_ORDERED (chaos) it may arrive after this message.
    MakeReady(c, actions);
    if (c->state != Conn::State::kReady) return;  // closed: close() released it
  }
  const bool body_seg0 = (msg->envelope.flags & wire::kFlagBodyInSegment0) != 0;
  if (body_seg0 && ev.num_segments == 0) {
    t.Discard(c->handle, ev.msg_id);
    ConnFailed(c, Status(FERRY_DATA_LOSS, "malformed message: body segment missing"),
               actions);
    return;
  }
  if (!body_seg0) {
    const auto* p = static_cast<const uint8_t*>(ev.header) + wire::kEnvelopeSize;
    msg->body.assign(p, p + r.remaining());
  }
  // Before authentication nothing but header-only handshake messages is
  // accepted: an unauthenticated peer cannot make us allocate payloads.
  if (c->state != Conn::State::kReady && ev.num_segments != 0) {
    t.Discard(c->handle, ev.msg_id);
    RejectAndClose(c, FERRY_UNAUTHENTICATED, "payload before authentication", actions);
    return;
  }
  bool all_inline = true;
  msg->segments.reserve(ev.num_segments);
  for (uint32_t i = 0; i < ev.num_segments; ++i) {
    const auto* seg = FERRY_ELEMENT_AT(const ferry_arrival_segment_t, ev.segments,
                                       ev.segment_stride, i);
    if (seg->inline_data == nullptr && seg->device.type == FERRY_DEVICE_CUDA &&
        device_memory_ && device_memory_->can_alloc()) {
      // Sent from device memory: it lands in device memory here, from the
      // worker's device allocator. Without memory there, it lands in host
      // memory and its call fails with the reason (value_codec.cc).
      auto buf = AlignedBuffer::OnDevice(device_memory_,
                                         DLDevice{kDLCUDA, seg->device.id}, seg->length);
      if (buf.ok()) {
        msg->segments.push_back(std::move(buf.value()));
        all_inline = false;
        continue;
      }
      if (msg->device_error.ok()) msg->device_error = buf.status();
    }
    msg->segments.emplace_back(seg->length);
    if (seg->inline_data != nullptr) {
      if (seg->length)
        std::memcpy(msg->segments.back().data, seg->inline_data, seg->length);
    } else {
      all_inline = false;
    }
  }
  if (!all_inline) {
    PlaceSegments(c, ev, std::move(msg), body_seg0, actions);
    return;
  }
  t.Discard(c->handle, ev.msg_id);
  if (body_seg0) TakeBodyFromSegment0(msg.get());
  OnMessageComplete(c, std::move(msg), actions);
}

// Asks the transport to land every segment in the message's own buffers
// (one place() for the whole message; PLACE_DONE completes it).
void Engine::PlaceSegments(Conn* c, const ferry_event_t& ev,
                           std::unique_ptr<InMessage> msg, bool body_in_segment0,
                           std::vector<Action>* actions) {
  Transport& t = *c->slot->transport;
  std::vector<ferry_place_dest_t> dests(ev.num_segments);
  for (uint32_t i = 0; i < ev.num_segments; ++i) {
    dests[i] = {};
    dests[i].struct_size = FERRY_PLACE_DEST_STRUCT_SIZE;
    const AlignedBuffer& b = msg->segments[i];
    dests[i].data = b.data;
    dests[i].capacity = b.size;
    dests[i].device = {static_cast<int32_t>(b.device.device_type), b.device.device_id};
  }
  auto pp = std::make_unique<PendingPlace>();
  pp->conn_id = c->id;
  pp->body_in_segment0 = body_in_segment0;
  pp->msg = std::move(msg);
  ferry_place_args_t args{};
  args.struct_size = FERRY_PLACE_ARGS_STRUCT_SIZE;
  args.num_dests = ev.num_segments;
  args.msg_id = ev.msg_id;
  args.dests = dests.data();
  args.dest_stride = sizeof(ferry_place_dest_t);
  args.user_data = pp.get();
  Status s = t.Place(c->handle, args);
  if (!s.ok()) {
    t.Discard(c->handle, ev.msg_id);
    ConnFailed(c, Status(s.code(), "receiving a message failed: " + s.message()),
               actions);
    return;
  }
  places_in_flight_.insert(pp.release());  // owned by PLACE_DONE now
}

// A whole message: to the handshake before authentication, else by kind
// (heartbeat, goodbye, store, member traffic).
void Engine::OnMessageComplete(Conn* c, std::unique_ptr<InMessage> msg,
                               std::vector<Action>* actions) {
  if (c->state == Conn::State::kClosed) return;
  c->last_heard = Clock::now();
  const wire::Kind kind = msg->envelope.kind;
  if (IsHandshake(kind)) {
    if (kind == wire::Kind::kHello && self_id_ == 0 && !c->outbound &&
        msg->body.size() > 1 &&
        (msg->body[1] == static_cast<uint8_t>(wire::Role::kMember) ||
         msg->body[1] == static_cast<uint8_t>(wire::Role::kMemberDevice))) {
      early_hellos_.emplace_back(c->id, std::move(msg));
      return;
    }
    OnHandshake(c, *msg, actions);
    return;
  }
  if (c->state != Conn::State::kReady) {
    FERRY_LOG(FERRY_LOG_WARN, kLog,
              "refused a connection from " + c->address +
                  ": it sent a message before authenticating");
    ++stats_.refused;
    RejectAndClose(c, FERRY_UNAUTHENTICATED, "authenticate first", actions);
    return;
  }
  if (kind == wire::Kind::kHeartbeat) return;
  if (kind == wire::Kind::kGoodbye && !c->store) {
    // The peer is leaving gracefully: what breaks next is not a death.
    auto it = peers_.find(c->peer_id);
    if (it != peers_.end() && (it->second->conn == c || it->second->dev_conn == c)) {
      it->second->leaving = true;
    }
    return;
  }
  if (c->store || IsStoreKind(kind)) {
    const uint64_t id = c->id;
    auto* raw = msg.release();
    order_.Queue(
        DeliveryOrder::Source::kStore, id,
        [this, id, raw] { sink_->OnStoreMessage(id, std::unique_ptr<InMessage>(raw)); },
        false, actions);
    return;
  }
  DeliverFromMember(c, std::move(msg), actions);
}

// Member traffic on its peer's current connection or device connection
// (one sequence space for both, in no particular order across them): a
// duplicate (by sequence number) is dropped, except that a duplicate
// control message is acknowledged again (the first acknowledgement may
// have been lost).
void Engine::DeliverFromMember(Conn* c, std::unique_ptr<InMessage> msg,
                               std::vector<Action>* actions) {
  auto it = peers_.find(c->peer_id);
  if (it == peers_.end() || (it->second->conn != c && it->second->dev_conn != c)) {
    return;  // superseded
  }
  Peer* p = it->second.get();
  const PeerKey from{p->record.id, p->record.incarnation};
  if (msg->envelope.seq != 0 && p->received.SeenBefore(msg->envelope.seq)) {
    if (msg->envelope.kind == wire::Kind::kControl) {
      auto* raw = msg.release();
      order_.Queue(
          DeliveryOrder::Source::kMember, from.id,
          [this, from, raw] {
            std::unique_ptr<InMessage> m(raw);
            sink_->OnDuplicateControl(from, *m);
          },
          false, actions);
    }
    return;
  }
  msg->from = from;
  // [this, raw] fits std::function's in-place storage: no allocation.
  auto* raw = msg.release();
  order_.Queue(
      DeliveryOrder::Source::kMember, from.id,
      [this, raw] { sink_->OnMessage(raw->from, std::unique_ptr<InMessage>(raw)); },
      false, actions);
}

}  // namespace ferry
