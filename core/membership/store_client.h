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
  };
  StoreClient(Engine& engine, Options options, MemberEventHandler on_event);

  // RendezvousStore. Join pumps the engine while it waits; a store that is
  // not listening yet is retried until the join timeout.
  StatusOr<wire::StoreJoined> Join(const wire::MemberRecord& self) override;
  void Leave(uint64_t id) override;

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

  std::mutex mu_;      // everything below
  uint64_t conn_ = 0;  // the latest attempt's connection
  bool answered_ = false;
  wire::StoreJoined reply_;
  // What broke the latest attempt's connection before the store answered.
  Status status_;
};

}  // namespace ferry
