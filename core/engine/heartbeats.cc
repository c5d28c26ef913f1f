// Liveness (engine.h): every authenticated connection that has sent
// nothing for a quarter of the peer timeout sends a heartbeat; one that has
// heard nothing for the whole timeout, or whose handshake has not finished
// within it, fails. This covers what a transport cannot see by itself: a
// frozen process, a host gone silent, a fabric that never reports an error.
// A peer's device connection (peer.h) carries no heartbeats: its primary's
// cover the peer.
#include "engine/connection.h"
#include "engine/engine.h"

namespace ferry {

void Engine::HeartbeatTick(Clock::time_point now, std::vector<Action>* actions) {
  const auto interval = options_.peer_timeout / 4;
  std::vector<Conn*> silent;
  for (auto& [id, cp] : conns_) {
    Conn* c = cp.get();
    if (c->state == Conn::State::kClosed) continue;
    if (c->state != Conn::State::kReady) {
      if (now - c->started > options_.peer_timeout) silent.push_back(c);
      continue;
    }
    // A device connection is quiet between device messages: the primary's
    // heartbeats say whether its peer lives.
    if (c->device) continue;
    if (now - c->last_heard > options_.peer_timeout) {
      silent.push_back(c);
      continue;
    }
    if (now - c->last_sent >= interval) {
      auto hb = std::make_unique<OutMessage>();
      hb->kind = wire::Kind::kHeartbeat;
      SendOnConnLocked(c, std::move(hb), 0);
    }
  }
  for (Conn* c : silent) {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(options_.peer_timeout)
            .count();
    ConnFailed(c,
               Status(FERRY_PEER_GONE,
                      c->state == Conn::State::kReady
                          ? "no message or heartbeat for " + std::to_string(ms) +
                                " ms (the process is frozen, overloaded, or the "
                                "network is down)"
                          : "the connection handshake did not finish within " +
                                std::to_string(ms) + " ms"),
               actions);
  }
}

}  // namespace ferry
