// Sending one message on one connection (engine.h), and closing one.
// A message is the envelope and its body in the transport's header (the
// body moves to segment 0 when the header limit is too small for it), then
// one segment per tensor, sent from the tensor's own memory.
#include "engine/connection.h"
#include "engine/engine.h"
#include "engine/peer.h"

#include <algorithm>

namespace ferry {

Status Engine::SendOnConnLocked(Conn* c, std::unique_ptr<OutMessage> msg, uint64_t seq) {
  Transport& t = *c->slot->transport;
  const auto& info = t.info();
  wire::Envelope env;
  env.kind = msg->kind;
  env.seq = seq;
  // The envelope goes into the room in front of the body, so the header is
  // the message's own buffer (message.h); the transport copies it during
  // send() (transport.h). A body too big for the header goes as segment 0.
  msg->body_in_segment0 = wire::kEnvelopeSize + msg->body_size() > info.max_header_size;
  if (msg->body_in_segment0) env.flags |= wire::kFlagBodyInSegment0;
  wire::EncodeEnvelopeAt(env, msg->frame.data());
  const size_t header_len =
      msg->body_in_segment0 ? wire::kEnvelopeSize : msg->frame.size();

  ferry_segment_t segs[64];
  const size_t nseg = msg->tensors.size() + (msg->body_in_segment0 ? 1 : 0);
  uint64_t total = header_len;
  if (nseg > std::min<uint32_t>(info.max_segments, 64)) {
    return Status(FERRY_RESOURCE_EXHAUSTED,
                  "a message carries " + std::to_string(msg->tensors.size()) +
                      " tensors; transport '" + c->slot->name + "' takes at most " +
                      std::to_string(std::min<uint32_t>(info.max_segments, 64) -
                                     (msg->body_in_segment0 ? 1 : 0)) +
                      ": send fewer tensors per call (or concatenate them)");
  }
  size_t i = 0;
  if (msg->body_in_segment0) {
    segs[i] = {};
    segs[i].struct_size = FERRY_SEGMENT_STRUCT_SIZE;
    segs[i].data = msg->body_data();
    segs[i].length = msg->body_size();
    segs[i].device = {FERRY_DEVICE_CPU, 0};
    total += msg->body_size();
    ++i;
  }
  for (const auto& tensor : msg->tensors) {
    segs[i] = {};
    segs[i].struct_size = FERRY_SEGMENT_STRUCT_SIZE;
    segs[i].data = tensor.data;
    segs[i].length = tensor.nbytes;
    segs[i].device = {static_cast<int32_t>(tensor.device.device_type),
                      tensor.device.device_id};
    segs[i].stream = tensor.stream;
    total += tensor.nbytes;
    ++i;
  }
  if (total > info.max_message_size) {
    return Status(FERRY_RESOURCE_EXHAUSTED,
                  "a message of " + std::to_string(total) + " bytes exceeds transport '" +
                      c->slot->name + "''s limit of " +
                      std::to_string(info.max_message_size) +
                      " bytes: split the payload or raise the plugin's limit");
  }
  ferry_send_args_t args{};
  args.struct_size = FERRY_SEND_ARGS_STRUCT_SIZE;
  args.num_segments = static_cast<uint32_t>(nseg);
  args.header = msg->frame.data();
  args.header_len = header_len;
  args.segments = segs;
  args.segment_stride = sizeof(ferry_segment_t);
  OutMessage* raw = msg.release();
  args.user_data = raw;
  auto calls = c->slot->LockCalls();
  Status s = t.Send(c->handle, args);
  if (!s.ok()) {
    delete raw;  // never posted: its tensors' deleters run now
    return s;
  }
  in_flight_.Insert(raw);
  c->last_sent = Clock::now();
  return Status::Ok();
}

Status Engine::SendHandshake(Conn* c, wire::Kind kind,
                             const std::function<void(wire::Writer&)>& body) {
  auto msg = std::make_unique<OutMessage>();
  msg->kind = kind;
  wire::Writer w = msg->BodyWriter();
  body(w);
  return SendOnConnLocked(c, std::move(msg), 0);
}

void Engine::CloseConnLocked(Conn* c) {
  if (c->state == Conn::State::kClosed) return;
  c->state = Conn::State::kClosed;
  c->backlog.clear();
  // A peer never points at a closed connection: FERRY_EV_CLOSED frees it, and
  // a peer whose outbound connection is closed must be free to connect again.
  if (auto it = peers_.find(c->peer_id); it != peers_.end()) {
    Peer* p = it->second.get();
    if (p->conn == c) p->conn = nullptr;
    if (p->outbound == c) p->outbound = nullptr;
    if (p->inbound == c) p->inbound = nullptr;
    if (p->dev_conn == c) p->dev_conn = nullptr;
    if (p->dev_outbound == c) p->dev_outbound = nullptr;
    if (p->dev_inbound == c) p->dev_inbound = nullptr;
  }
  auto calls = c->slot->LockCalls();
  c->slot->transport->Close(c->handle);
  // The Conn lives on until FERRY_EV_CLOSED: events for it may still come.
}

}  // namespace ferry
