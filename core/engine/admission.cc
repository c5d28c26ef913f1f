// What the engine admits (engine.h, EngineOptions::limits): messages up to
// max_message_size either way, connections up to max_connections, and a
// count of the bytes queued to each peer that the agent's calls wait on.
// Each refusal says which limit and how to raise it (common/limits.h); a
// message announced too large is refused before anything is allocated for
// it, so a peer that lies about a length costs this worker nothing.
#include "common/log.h"
#include "engine/connection.h"
#include "engine/engine.h"
#include "engine/peer.h"

#include <algorithm>

namespace ferry {
namespace {

constexpr const char* kLog = "engine";

std::string Who(const Conn& c) {
  if (!c.peer_name.empty()) return "worker '" + c.peer_name + "' (" + c.address + ")";
  return c.address.empty() ? "a peer" : c.address;
}

}  // namespace

Status Engine::CheckMessageSize(const OutMessage& msg) const {
  const uint64_t total = msg.total_bytes();
  if (total <= options_.limits.max_message_size) return Status::Ok();
  return Status(
      FERRY_RESOURCE_EXHAUSTED,
      "a message of " + std::to_string(total) + " bytes exceeds " +
          Limits::Describe("max_message_size", options_.limits.max_message_size) +
          ": nothing was sent; send less per call (the receiver's limit "
          "must allow it too)");
}

void Engine::ChargeQueuedBytes(Peer* p, OutMessage* msg) {
  if (!msg->queued.charged()) msg->queued.Charge(p->queued_bytes, msg->total_bytes());
}

uint64_t Engine::QueuedBytesTo(uint64_t id) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = peers_.find(id);
  return it == peers_.end() ? 0 : it->second->queued_bytes->load();
}

bool Engine::ArrivalWithinLimit(Conn* c, const ferry_event_t& ev,
                                std::vector<Action>* actions) {
  const uint64_t limit = options_.limits.max_message_size;
  uint64_t total = ev.header_len;
  bool over = total > limit;
  for (uint32_t i = 0; i < ev.num_segments && !over; ++i) {
    const auto* seg = FERRY_ELEMENT_AT(const ferry_arrival_segment_t, ev.segments,
                                       ev.segment_stride, i);
    over = seg->length > limit - total;  // no overflow: total <= limit here
    if (!over) total += seg->length;
  }
  if (!over) return true;
  c->slot->transport->Discard(c->handle, ev.msg_id);
  const std::string what =
      "it announced a message larger than " + Limits::Describe("max_message_size", limit);
  FERRY_LOG(FERRY_LOG_WARN, kLog,
            "closing the connection from " + Who(*c) + ": " + what +
                "; nothing of it was allocated");
  ConnFailed(c, Status(FERRY_RESOURCE_EXHAUSTED, what), actions);
  return false;
}

void Engine::RefuseIfOverConnectionLimit(Conn* c) {
  const uint32_t limit = options_.limits.max_connections;
  if (conns_.size() <= limit) return;
  ++refused_over_limit_;
  if (refused_over_limit_ == 1 || refused_over_limit_ % 1000 == 0) {
    FERRY_LOG(FERRY_LOG_WARN, kLog,
              "closed a connection from " + Who(*c) + " at once: this worker holds " +
                  std::to_string(conns_.size() - 1) + " connections, " +
                  Limits::Describe("max_connections", limit) + " (" +
                  std::to_string(refused_over_limit_) + " refused so far)");
  }
  CloseConnLocked(c);
}

std::chrono::milliseconds Engine::HandshakeTimeout() const {
  const auto t = options_.limits.handshake_timeout;
  return t.count() > 0 ? t : options_.peer_timeout;
}

std::chrono::milliseconds Engine::HeartbeatCheckInterval() const {
  return std::max(std::chrono::milliseconds(1),
                  std::min(options_.peer_timeout, HandshakeTimeout()) / 8);
}

}  // namespace ferry
