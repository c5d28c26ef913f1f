// The engine's view of one loaded transport and of one connection on it.
// Plain data, guarded by the engine's lock (engine.h); the engine's methods
// move a connection through its states.
#pragma once

#include "engine/auth.h"
#include "engine/message.h"
#include "transport/transport.h"
#include "wire/messages.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace ferry {

using Clock = std::chrono::steady_clock;

struct Conn;

// One opened transport: its listeners, the event array progress() fills,
// and the connections it carries, found by the plugin's handle.
struct TransportSlot {
  // Shared with the device memory services (device_memory.h), which keep
  // the context open while received device tensors live.
  std::shared_ptr<Transport> transport;
  std::string name;
  bool member = false;  // carries member traffic (else: only the store)
  ferry_listener_t* listener = nullptr;
  std::string address;
  ferry_listener_t* store_listener = nullptr;
  std::vector<ferry_event_t> events;
  // Held around every plugin call when the plugin is not THREAD_SAFE.
  std::unique_ptr<std::mutex> call_mu;
  std::unordered_map<ferry_conn_t*, Conn*> by_handle;

  // Locks call_mu when the plugin needs it; an empty lock otherwise.
  std::unique_lock<std::mutex> LockCalls() {
    return call_mu ? std::unique_lock<std::mutex>(*call_mu)
                   : std::unique_lock<std::mutex>();
  }
};

// One connection, a member's or the store's, from connect()/accept to
// FERRY_EV_CLOSED. Its state is the handshake's progress (handshake.cc).
struct Conn {
  enum class State {
    kConnecting,
    kHelloSent,
    kAwaitHello,
    kChallengeSent,
    kAuthSent,
    kReady,
    kClosed
  };
  uint64_t id = 0;
  TransportSlot* slot = nullptr;
  ferry_conn_t* handle = nullptr;
  State state = State::kConnecting;
  bool outbound = false;
  bool store = false;   // a store connection (either side)
  bool device = false;  // a member's device connection (peer.h), not its primary
  wire::Role role = wire::Role::kMember;  // what the connector is
  uint64_t peer_id = 0;                   // expected (outbound) or claimed
  uint64_t peer_incarnation = 0;
  std::string peer_name;
  std::string address;  // outbound: where to; inbound: the peer's, if known
  auth::Nonce my_nonce{};
  auth::Nonce their_nonce{};
  Clock::time_point started{};
  Clock::time_point last_heard{};
  Clock::time_point last_sent{};
  // Store connections queue here until authenticated (members' messages
  // queue on their Peer instead).
  std::deque<std::unique_ptr<OutMessage>> backlog;
};

// One place() in flight: the message being assembled and its destinations.
struct PendingPlace {
  uint64_t conn_id = 0;
  std::unique_ptr<InMessage> msg;
  bool body_in_segment0 = false;
};

}  // namespace ferry
