// One ferry connection, multiplexed over the context's RDM endpoint.
//
// RDM endpoints have no connections, so the plugin makes its own: each side
// names the connection by a local id (HandleTable), exchanged in
// CONNECT/ACCEPT, and every frame carries the receiver's id. Messages carry a
// per-connection sequence number and the receiver delivers them in that
// order whatever order the provider completes them in (RDM promises
// reliability, not completion order), which is what FERRY_CAP_ORDERED
// claims.
//
// Lifecycle (state):
//   kConnecting --ACCEPT--> kOpen --error / peer DISCONNECT--> kBroken
//        |                    |                                  |
//        +--REJECT / timeout / send error--> kBroken             |
//   any state --host close()--> close_called ... --> kClosed (CLOSED event)
// A closing connection waits for its RMA reads in flight to land (the host's
// buffers are borrowed until then) and, when the peer may still be reading
// this side's exposed segments, for the peer's DISCONNECT_ACK (or an error,
// or close_timeout_ms) before CLOSED.
#pragma once

#include "messages.h"
#include "peer.h"
#include "wire.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

namespace ferry_fabric {

class Context;

class Conn {
 public:
  static constexpr uint32_t kMagic = 0x4e4f4346;  // "FCON"
  enum class State : uint8_t { kConnecting, kOpen, kBroken, kClosed };
  using Clock = std::chrono::steady_clock;

  Conn(Context* context, Peer* remote, bool is_accepted)
      : ctx(context), peer(remote), accepted(is_accepted) {}
  ~Conn() { magic = 0; }

  uint32_t magic = kMagic;
  Context* ctx;
  uint64_t id = 0;  // set by the context's table right after construction
  Peer* peer;
  bool accepted;
  State state = State::kConnecting;
  uint64_t remote_id = 0;      // the peer's id for this connection
  wire::Limits peer_limits{};  // the peer's receive limits
  // What the small-send fast path may send, both sides' limits taken
  // together (Context::SetPeerLimits, with peer_limits): a frame of at most
  // `frame` bytes (0: no such path), inline segments of at most
  // `inline_max`, headers of at most `max_header`, `max_segments` segments.
  struct SmallSends {
    uint64_t frame = 0;
    uint64_t inline_max = 0;
    uint32_t max_header = 0;
    uint32_t max_segments = 0;
  } small;
  void* user_data = nullptr;       // conn_user_data in events
  void* connect_cookie = nullptr;  // connect()'s user_data for CONNECTED

  // --- send side -----------------------------------------------------------
  std::deque<SendOp*> txq;       // not yet encoded, in send() order
  uint32_t next_seq = 0;         // seq of the next MSG put on the wire
  bool in_tx_retry = false;      // listed in the context's retry list
  std::vector<SendOp*> waiting;  // sent, waiting for FIN / CTS / streaming

  // --- receive side --------------------------------------------------------
  uint32_t expected_seq = 0;         // next seq to deliver
  std::map<uint32_t, RxMsg*> early;  // arrived ahead of expected_seq
  std::deque<RxMsg*> ready;          // in order, not yet delivered
  RxMsg* held = nullptr;             // delivered (or queued), unanswered
  uint64_t next_msg_id = 1;
  std::vector<Placement*> placements;  // place()s still moving bytes

  // --- teardown --------------------------------------------------------------
  bool peer_closed = false;  // the peer's DISCONNECT arrived
  uint32_t peer_final_seq = 0;
  bool ack_owed = false;         // DISCONNECT_ACK once our reads landed
  bool close_called = false;     // the host's close()
  bool disconnect_owed = false;  // our DISCONNECT once our reads landed
  bool awaiting_ack = false;     // the peer may still read our segments
  bool has_deadline = false;     // connect or close timeout armed
  Clock::time_point deadline{};
  ferry_status_t broken_status = FERRY_OK;
  std::string broken_message;
  std::string peer_address;  // conn_peer_address()

  bool Open() const { return state == State::kOpen && !close_called; }
  uint32_t ReadsInFlight() const {
    uint32_t n = 0;
    for (const Placement* p : placements) n += p->reads_in_flight;
    return n;
  }
};

}  // namespace ferry_fabric
