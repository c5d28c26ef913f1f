// ferry::RendezvousStore: what a worker needs from its job's rendezvous
// store, whichever store it is (DESIGN.md, "The core": the embedded store by
// default, etcd for clusters). A worker joins with its member record and
// gets its id, its incarnation and the members already there; from then on
// the store tells it of every other member that joins, leaves or is gone
// (and, in a static job, reaches the shutdown barrier); at the end it
// leaves.
//
// Implementations today: StoreServer (store_server.h), the embedded store,
// joined directly by the worker that hosts it, and StoreClient
// (store_client.h), a worker joining an embedded store hosted elsewhere.
#pragma once

#include "common/status.h"
#include "wire/messages.h"

#include <cstdint>
#include <functional>

namespace ferry {

// The reason of the LEFT event the store sends when the worker hosting it
// leaves (normally): the store goes with it, and its members know that this
// loss of the store is no failure.
inline constexpr const char kStoreHostLeft[] = "it hosted the rendezvous store";

class RendezvousStore {
 public:
  // Receives the store's news of other members: joined, left, gone (with
  // the store's reason). Given to an implementation when it is made. It is
  // called on whichever thread learnt the news, never with the store's lock
  // held, and may be called before Join returns (a member that joined just
  // after this one).
  using MemberEventHandler = std::function<void(const wire::StoreMemberEvent&)>;

  virtual ~RendezvousStore() = default;

  // Joins the job as `self` (its name, wire version and endpoints; the
  // store assigns id and incarnation). Blocks until the store answered or
  // the implementation's join timeout passed. On success, the store's
  // answer: `self` with its id and incarnation, and the members already
  // joined. A refusal (name taken, bad secret) is the store's status and
  // message; an unreachable store a clear error naming its address.
  virtual StatusOr<wire::StoreJoined> Join(const wire::MemberRecord& self) = 0;

  // Leaves the job gracefully (the others hear "left", not "gone"). Does
  // not wait for an answer; a no-op if `id` never joined.
  virtual void Leave(uint64_t id) = 0;

  // A static job's shutdown barrier: member `id` reached shutdown. The
  // others hear it as an ARRIVED member event (docs/membership.md, "The
  // shutdown barrier"). Idempotent; does not wait for an answer.
  virtual void Arrive(uint64_t id) = 0;
};

}  // namespace ferry
