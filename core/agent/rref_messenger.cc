// The RRef protocol's messages over the engine (rref_messenger.h).
#include "agent/rref_messenger.h"

namespace ferry {

void RRefMessenger::SendControl(uint64_t to, const wire::Control& c) {
  auto m = std::make_unique<OutMessage>();
  m->kind = wire::Kind::kControl;
  wire::Writer w = m->BodyWriter();
  wire::Put(w, c);
  engine_.SendToMember(to, std::move(m));  // a failure is retried / moot
}

void RRefMessenger::QueueAck(uint64_t to, uint64_t control_id) {
  std::lock_guard<std::mutex> l(mu_);
  acks_to_send_[to].push_back(control_id);
}

void RRefMessenger::FlushAcks() {
  std::map<uint64_t, std::vector<uint64_t>> acks;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (acks_to_send_.empty()) return;
    acks.swap(acks_to_send_);
  }
  for (auto& [to, ids] : acks) {
    auto m = std::make_unique<OutMessage>();
    m->kind = wire::Kind::kControlAck;
    wire::Writer w = m->BodyWriter();
    w.U32(static_cast<uint32_t>(ids.size()));
    for (uint64_t id : ids) w.U64(id);
    engine_.SendToMember(to, std::move(m));
  }
}

void RRefMessenger::OnControl(PeerKey from, const InMessage& msg) {
  wire::Reader r(msg.body.data(), msg.body.size());
  wire::Control c;
  if (wire::Get(r, &c)) rrefs_.OnControl(from.id, from.incarnation, c);
}

void RRefMessenger::OnControlAck(PeerKey from, const InMessage& msg) {
  wire::Reader r(msg.body.data(), msg.body.size());
  const uint32_t n = r.Count(8);
  for (uint32_t i = 0; i < n && r.ok(); ++i) {
    const uint64_t id = r.U64();
    if (r.ok()) rrefs_.OnControlAck(from.id, id);
  }
}

void RRefMessenger::OnDuplicateControl(PeerKey from, const InMessage& msg) {
  wire::Reader r(msg.body.data(), msg.body.size());
  wire::Control c;
  if (wire::Get(r, &c)) QueueAck(from.id, c.control_id);
}

}  // namespace ferry
