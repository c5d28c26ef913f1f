// ferry::StoreClient: a worker's side of the embedded rendezvous store when
// another worker hosts it (StoreServer). It talks to the store over one of
// the engine's store connections: JOIN with this worker's record, then
// JOINED (id, incarnation, members) and the store's member events, then
// LEAVE. The engine hands this connection's messages and its loss to the
// agent (EngineSink), which passes them here.
#pragma once

#include "common/status.h"
#include "engine/message.h"
#include "membership/store.h"
#include "wire/messages.h"

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace ferry {

class Engine;

class StoreClient : public RendezvousStore {
 public:
  struct Options {
    std::string address;  // host:port of the worker hosting the store
    std::string job;      // for error messages
    std::chrono::milliseconds join_timeout{10000};
    uint32_t world_size = 0;  // the joiner's job: 0 = elastic
  };
  StoreClient(Engine& engine, Options options, MemberEventHandler on_event);

  // RendezvousStore. Join pumps the engine while it waits; a store that is
  // not listening yet is retried until the join timeout.
  StatusOr<wire::StoreJoined> Join(const wire::MemberRecord& self) override;
  void Leave(uint64_t id) override;
  void Arrive(uint64_t id) override;

  // True once the connection of a successful join is gone (the store's
  // host died or left): no news comes from the store any more.
  bool lost() const;

  // A message from the store (JOINED, a member event).
  void OnMessage(uint64_t conn, const InMessage& msg);
  // A store connection closed or failed. `worker_stopping`: this worker is
  // shutting down, so losing the store is expected and not worth a warning.
  void OnConnGone(uint64_t conn, const Status& why, bool worker_stopping);

 private:
  // One attempt: connect, send JOIN, wait for the answer until `deadline`.
  Status TryJoin(const wire::MemberRecord& self,
                 std::chrono::steady_clock::time_point deadline);

  Engine& engine_;
  const Options options_;
  const MemberEventHandler on_event_;

  // Sends a body-less store message (LEAVE, ARRIVE) on the joined connection.
  void SendBare(wire::Kind kind);
  // "nobody seems to host the rendezvous store ... (why)", and how to host one.
  std::string NobodyHostsIt(const std::string& why) const;

  mutable std::mutex mu_;  // everything below
  uint64_t conn_ = 0;      // the latest attempt's connection
  bool answered_ = false;
  bool lost_ = false;
  // The name of the worker hosting the store, once it said it left normally.
  std::string host_left_;
  wire::StoreJoined reply_;
  // What broke the latest attempt's connection before the store answered.
  Status status_;
};

}  // namespace ferry
