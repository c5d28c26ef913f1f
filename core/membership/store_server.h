// ferry::StoreServer: the job's embedded rendezvous store, hosted by one
// worker (the seed). It hands out member ids (stable per name) and
// incarnations (one more each time a name joins again), keeps the member
// records, and pushes every join, leave and death to every member over the
// connection each keeps to it. A member whose store connection breaks or
// goes silent (heartbeats) is announced gone.
//
// If the hosting worker dies, members already joined keep working with each
// other (they hold each other's records); new joins fail with a clear error
// until a store is back. A replicated store is future work (docs/membership.md).
//
// The hosting worker is a member like the others: it joins through this
// class's RendezvousStore interface, without a connection, and hears of the
// others through Hooks::local_event.
#pragma once

#include "common/status.h"
#include "engine/message.h"
#include "membership/store.h"
#include "wire/messages.h"

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace ferry {

class StoreServer : public RendezvousStore {
 public:
  struct Hooks {
    // Send `msg` on store connection `conn`.
    std::function<void(uint64_t conn, std::unique_ptr<OutMessage> msg)> send;
    // Tell the hosting worker itself about a membership event.
    MemberEventHandler local_event;
  };
  // `world_size`: 0 for an elastic job; else the job is static and every
  // joiner must name this world_size and a rank of its own (the hosting
  // worker's options decide the job's kind, before anyone can join).
  StoreServer(Hooks hooks, uint32_t world_size)
      : hooks_(std::move(hooks)), world_size_(world_size) {}

  // RendezvousStore, for the hosting worker: it joins and leaves without a
  // connection. Join never blocks.
  StatusOr<wire::StoreJoined> Join(const wire::MemberRecord& self) override;
  void Leave(uint64_t id) override;
  void Arrive(uint64_t id) override;
  // Members alive other than `id` (the hosting worker waits, at the end of
  // a static job's shutdown, until the others left: the store goes with it).
  size_t AliveOthers(uint64_t id);
  // A store-protocol message (JOIN, LEAVE, ARRIVE) on connection `conn`.
  void OnMessage(uint64_t conn, const InMessage& msg);
  // `why`: what broke the connection (a heartbeat timeout, a reset, ...);
  // passed on to the members with the GONE event.
  void OnConnGone(uint64_t conn, const Status& why);

 private:
  struct Entry {
    wire::MemberRecord record;
    uint64_t conn = 0;  // 0: the hosting worker
    bool alive = false;
    bool gone = false;     // not alive: lost (true) or left (false)
    bool arrived = false;  // reached the shutdown barrier (static jobs)
  };
  // Admits `join` (joining on `conn`, 0 for the hosting worker) or refuses
  // it; the reply for the joiner.
  wire::StoreJoined Admit(uint64_t conn, wire::StoreJoin join);
  // Why `join` cannot join this job ("" if it can). Called with mu_ held.
  std::string Refusal(const wire::StoreJoin& join, int32_t* code) const;
  // Marks the member behind `conn` (0: by id) arrived; false if it was
  // already, or is unknown.
  bool MarkArrived(uint64_t conn, uint64_t id, wire::MemberRecord* r);
  void Announce(wire::MemberEventKind kind, const wire::MemberRecord& r,
                uint64_t except_conn, const std::string& reason = "");
  // Marks the member behind `conn` (0: by id) not alive; its record, or an
  // empty one when none matched.
  wire::MemberRecord MarkDown(uint64_t conn, uint64_t id, bool gone);

  Hooks hooks_;
  const uint32_t world_size_;
  std::mutex mu_;
  std::map<std::string, Entry> by_name_;
  uint64_t next_id_ = 1;
};

}  // namespace ferry
