// The engine's record of one member it talks to: its connection (at most
// one authenticated, plus at most one of each direction mid-handshake), its
// device connection when device messages take another transport (the same
// shape), the messages waiting for either, their sequence numbers (one
// space for both connections), and whether it is gone.
#pragma once

#include "common/status.h"
#include "engine/message.h"
#include "wire/messages.h"

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <set>
#include <string>
#include <utility>

namespace ferry {

struct Conn;

// Which sequence numbers of one sender were seen: every seq <= floor, and
// those in `above`. A transport may deliver a message twice (the chaos
// plugin does on purpose); a member's messages are numbered so the second
// copy is dropped here.
class SeenSequences {
 public:
  // True when `seq` was seen before; records it otherwise.
  bool SeenBefore(uint64_t seq) {
    if (seq <= floor_) return true;
    if (seq == floor_ + 1 && above_.empty()) {  // in order: the usual case
      floor_ = seq;
      return false;
    }
    if (above_.count(seq) != 0) return true;
    above_.insert(seq);
    while (!above_.empty() && *above_.begin() == floor_ + 1) {
      above_.erase(above_.begin());
      ++floor_;
    }
    return false;
  }

 private:
  uint64_t floor_ = 0;
  std::set<uint64_t> above_;
};

struct Peer {
  wire::MemberRecord record;        // endpoints may be empty (learnt from HELLO)
  Conn* conn = nullptr;             // the authenticated connection
  Conn* outbound = nullptr;         // our connect() in progress, if any
  Conn* inbound = nullptr;          // its connection, accepted and mid-handshake
  bool waiting_for_theirs = false;  // we lost the connect race
  // Messages numbered and waiting for the connection to be authenticated.
  std::deque<std::pair<uint64_t, std::unique_ptr<OutMessage>>> backlog;
  // The device connection: a second authenticated connection, on the
  // transport that device messages take (route.h) when that is not the
  // primary's. Opened by the first side that sends a device message (the
  // lower id wins a race, as for the primary); carries no heartbeats (the
  // primary's cover the peer); its failure is the peer's death, unless the
  // peer is leaving.
  Conn* dev_conn = nullptr;
  Conn* dev_outbound = nullptr;
  Conn* dev_inbound = nullptr;
  bool dev_waiting_for_theirs = false;
  std::deque<std::pair<uint64_t, std::unique_ptr<OutMessage>>> dev_backlog;
  // What the last device message to it took: a transport's name, or
  // "staged" (through host memory over the primary).
  std::string device_route;
  bool staging_logged = false;
  uint64_t next_seq = 1;
  // Bytes of messages to it not yet written to a connection (waiting in a
  // backlog, or posted and not completed): what a new call to it waits on
  // (Limits::max_queued_bytes_per_connection). Shared with each message's
  // QueuedCharge, which may outlive the Peer; read without the engine's lock.
  std::shared_ptr<std::atomic<uint64_t>> queued_bytes =
      std::make_shared<std::atomic<uint64_t>>(0);
  SeenSequences received;
  bool gone = false;
  // It said GOODBYE, or the store said it left: its connection closing is
  // a leave, not a death. We read that connection to its end (its last
  // replies, GOODBYE, the close) but send nothing new on it.
  bool leaving = false;
  Status gone_why;

  Status LeftTheJob() const {
    return Status(FERRY_PEER_GONE, "worker '" + record.name + "' left the job");
  }
};

}  // namespace ferry
