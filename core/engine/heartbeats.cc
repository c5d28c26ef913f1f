// Liveness (engine.h): every authenticated connection that has sent
// nothing for a quarter of the peer timeout sends a heartbeat; one that has
// heard nothing for the whole timeout, or whose handshake has not finished
// within the handshake timeout (a limit: common/limits.h), fails. This covers what a
// transport cannot see by itself: a frozen process, a host gone silent, a fabric that
// never reports an error. A peer's device connection (peer.h) carries no heartbeats: its
// primary's cover the peer.
#include "common/log.h"
#include "engine/connection.h"
#include "engine/engine.h"

namespace ferry {

void Engine::HeartbeatTick(Clock::time_point now, std::vector<Action>* actions) {
  const auto interval = options_.peer_timeout / 4;
  const auto handshake_timeout = HandshakeTimeout();
  std::vector<Conn*> silent;
  for (auto& [id, cp] : conns_) {
    Conn* c = cp.get();
    if (c->state == Conn::State::kClosed) continue;
    if (c->state != Conn::State::kReady) {
      if (now - c->started > handshake_timeout) silent.push_back(c);
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
    if (c->state != Conn::State::kReady && !c->outbound) {
      // A stranger that connected and never finished (or never began) its
      // handshake: nobody else hears of it, so the log says it.
      FERRY_LOG(
          FERRY_LOG_WARN, "engine",
          "closed the connection from " +
              (c->address.empty() ? std::string("a peer") : c->address) +
              ": its handshake did not finish within " +
              std::to_string(handshake_timeout.count()) + " ms (" +
              (options_.limits.handshake_timeout.count() > 0
                   ? Limits::Describe("handshake_timeout_ms",
                                      static_cast<uint64_t>(handshake_timeout.count()))
                   : "the peer timeout; set the limit handshake_timeout_ms "
                     "to change it alone") +
              ")");
    }
    ConnFailed(c,
               Status(FERRY_PEER_GONE,
                      c->state == Conn::State::kReady
                          ? "no message or heartbeat for " + std::to_string(ms) +
                                " ms (the process is frozen, overloaded, or the "
                                "network is down)"
                          : "the connection handshake did not finish within " +
                                std::to_string(handshake_timeout.count()) + " ms"),
               actions);
  }
}

}  // namespace ferry
