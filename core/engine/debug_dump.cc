// The engine's part of the debug dump (agent.h, DebugDump): its transports,
// its peers (state, transport, when each was last heard from, messages
// queued for it) and the connections still in their handshake or serving
// the store. Read under the engine's lock, once.
#include "engine/connection.h"
#include "engine/engine.h"
#include "engine/peer.h"

#include <nlohmann/json.hpp>

namespace ferry {
namespace {

const char* StateName(Conn::State s) {
  switch (s) {
    case Conn::State::kConnecting:
      return "connecting";
    case Conn::State::kHelloSent:
      return "hello sent";
    case Conn::State::kAwaitHello:
      return "awaiting hello";
    case Conn::State::kChallengeSent:
      return "challenge sent";
    case Conn::State::kAuthSent:
      return "auth sent";
    case Conn::State::kReady:
      return "ready";
    case Conn::State::kClosed:
      return "closed";
  }
  return "?";
}

int64_t MsSince(Clock::time_point t, Clock::time_point now) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - t).count();
}

}  // namespace

nlohmann::json Engine::DebugDump() const {
  const auto now = Clock::now();
  nlohmann::json transports = nlohmann::json::array(), peers = nlohmann::json::array(),
                 conns = nlohmann::json::array();
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& slot : slots_) {
    size_t open = 0;
    for (const auto& [id, c] : conns_) {
      if (c->slot == slot.get() && c->state != Conn::State::kClosed) ++open;
    }
    transports.push_back({{"name", slot->name},
                          {"address", slot->address},
                          {"carries_members", slot->member},
                          {"hosts_store", slot->store_listener != nullptr},
                          {"connections", open}});
  }
  for (const auto& [id, p] : peers_) {
    const Conn* c = p->conn;
    nlohmann::json e = {
        {"id", id},
        {"name", p->record.name},
        {"incarnation", p->record.incarnation},
        {"state",
         p->gone        ? "gone"
         : p->leaving   ? "leaving"
         : c != nullptr ? "connected"
         : (p->outbound != nullptr || p->inbound != nullptr || p->waiting_for_theirs)
             ? "connecting"
             : "not connected"},
        {"transport", c != nullptr ? c->slot->name : ""},
        {"queued_until_connected", p->backlog.size()},
    };
    if (c != nullptr) {
      e["last_heard_ms_ago"] = MsSince(c->last_heard, now);
      e["last_sent_ms_ago"] = MsSince(c->last_sent, now);
    }
    if (p->dev_conn != nullptr || !p->dev_backlog.empty()) {
      e["device_transport"] = p->dev_conn != nullptr ? p->dev_conn->slot->name : "";
      e["device_queued_until_connected"] = p->dev_backlog.size();
    }
    if (p->gone) e["why"] = p->gone_why.ToString();
    peers.push_back(std::move(e));
  }
  for (const auto& [id, c] : conns_) {
    // Ready member connections are shown with their peer above.
    if (c->state == Conn::State::kClosed ||
        (c->state == Conn::State::kReady && !c->store)) {
      continue;
    }
    nlohmann::json e = {{"id", id},
                        {"transport", c->slot->name},
                        {"state", StateName(c->state)},
                        {"direction", c->outbound ? "outbound" : "inbound"},
                        {"kind", c->store    ? "store"
                                 : c->device ? "device"
                                             : "member"},
                        {"age_ms", MsSince(c->started, now)},
                        {"queued", c->backlog.size()}};
    if (!c->peer_name.empty()) e["peer"] = c->peer_name;
    if (!c->address.empty()) e["address"] = c->address;
    if (c->state == Conn::State::kReady) {
      e["last_heard_ms_ago"] = MsSince(c->last_heard, now);
    }
    conns.push_back(std::move(e));
  }
  return {{"transports", std::move(transports)},
          {"peers", std::move(peers)},
          {"other_connections", std::move(conns)},
          {"refused_handshakes", stats_.refused},
          {"connections_refused_at_limit", refused_over_limit_},
          {"hellos_before_own_id", early_hellos_.size()}};
}

}  // namespace ferry
