// ferry::RRefContext: the RRef protocol's state on one worker
// (docs/protocol.md, after shared/reference/rref-protocol.rst).
//
// Owner side: one OwnerState per RRefId holding the value and the set of
// forks (UserRRefs) the owner knows, each with the worker holding it. The
// value is deleted exactly when no known fork and no local handle remains
// and the value exists (a placeholder created by an early fork request
// waits for its remote() call).
//
// User side: one UserState per (RRefId, ForkId). A user tells the owner
// when it is deleted (G1) but only once the owner has confirmed it, and a
// parent is not deleted while a child it forked is unconfirmed (G2): the
// pending child holds it.
//
// Control messages (fork request, owner ack, child accept, user delete) are
// idempotent, deduplicated per sender by control id, acknowledged, and
// re-sent until acknowledged or the peer is gone. No ordering between any
// two workers is assumed.
//
// Thread-safe. Sends happen outside the lock, through Hooks.
#pragma once

#include "common/status.h"
#include "wire/messages.h"
#include "wire/value.h"

#include <nlohmann/json_fwd.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

namespace ferry {

class RRefContext;

// One handle the application holds (a ferry_rref_t). Destroying the last
// reference to it releases the fork (user) or a local holder (owner).
class RRefHandle {
 public:
  ~RRefHandle();
  const wire::Guid& rref_id() const { return rref_; }
  const wire::Guid& fork_id() const { return fork_; }
  uint64_t owner() const { return owner_; }
  bool is_owner() const { return is_owner_; }
  bool confirmed_by_owner() const;  // RRefContext::ConfirmedByOwner

 private:
  friend class RRefContext;
  RRefHandle(std::shared_ptr<RRefContext> ctx, wire::Guid rref, wire::Guid fork,
             uint64_t owner, bool is_owner)
      : ctx_(std::move(ctx)),
        rref_(rref),
        fork_(fork),
        owner_(owner),
        is_owner_(is_owner) {}
  std::shared_ptr<RRefContext> ctx_;
  wire::Guid rref_;
  wire::Guid fork_;
  uint64_t owner_;
  bool is_owner_;
};

class RRefContext : public std::enable_shared_from_this<RRefContext> {
 public:
  struct Hooks {
    // Send a control message / an acknowledgement to member `to`. Failing
    // to send is fine: the message is retried until the peer is gone.
    std::function<void(uint64_t to, const wire::Control&)> send_control;
    std::function<void(uint64_t to, uint64_t control_id)> send_ack;
  };
  explicit RRefContext(Hooks hooks);
  void SetSelf(uint64_t id);
  uint64_t self() const { return self_; }

  // ---- creation -------------------------------------------------------
  // RRef(value) on this worker: an OwnerRRef and one local handle.
  std::shared_ptr<RRefHandle> CreateOwned(std::shared_ptr<Value> value);
  // remote(): a new, unconfirmed UserRRef owned by `owner`.
  std::shared_ptr<RRefHandle> CreateForRemote(uint64_t owner);
  // The owner answered the remote() call: the fork is confirmed.
  void ConfirmRemote(const wire::Guid& rref, const wire::Guid& fork);
  // The remote() call never reached the owner (send failed, owner gone).
  void AbandonRemote(const wire::Guid& rref, const wire::Guid& fork);

  // ---- owner side of calls -----------------------------------------------
  // A remote() request arrived: fork `fork` held by `holder` exists.
  void OwnerAddFork(const wire::Guid& rref, const wire::Guid& fork, uint64_t holder);
  // The remote() function finished (value or error).
  void OwnerSetValue(const wire::Guid& rref, Status status, std::shared_ptr<Value> value);
  // Calls `done` once the value of owned `rref` exists (at once if it does).
  // NOT_FOUND if this worker owns no such RRef.
  using ValueCallback = std::function<void(const Status&, std::shared_ptr<Value>)>;
  void WhenReady(const wire::Guid& rref, ValueCallback done);
  // Owner handle access.
  bool IsReady(const wire::Guid& rref);
  // Does the owner know of `h`'s fork? Always for the owner's own handles;
  // for a user, once the owner acknowledged it (remote() answered, or the
  // fork's control message acknowledged).
  bool ConfirmedByOwner(const RRefHandle& h);
  StatusOr<std::shared_ptr<Value>> OwnedValue(const wire::Guid& rref);
  Status SetOwnedValue(const wire::Guid& rref, std::shared_ptr<Value> value);

  // ---- RRefs inside messages -------------------------------------------
  // Sending `h` to member `to`: creates the child fork (G2 bookkeeping).
  StatusOr<wire::RRefRef> Fork(const RRefHandle& h, uint64_t to);
  // The message carrying `ref` was never sent: undo Fork.
  void ForkAborted(const wire::RRefRef& ref);
  // A message from `from` carrying `ref` was delivered: the new handle.
  std::shared_ptr<RRefHandle> Receive(uint64_t from, const wire::RRefRef& ref);

  // ---- protocol -----------------------------------------------------------
  void OnControl(uint64_t from, uint64_t from_incarnation, const wire::Control& c);
  void OnControlAck(uint64_t from, uint64_t control_id);
  // Re-sends control messages unacknowledged for `after`.
  void Retry(std::chrono::milliseconds after);
  // Member `id` is gone (docs/protocol.md, "Failures").
  void OnPeerGone(uint64_t id);
  // Shutdown: forget everything, send nothing more.
  void Shutdown();
  // Is `owner` known to be gone (for to_here's error)?
  bool OwnerGone(uint64_t owner);

  struct Stats {
    uint64_t owned = 0, users = 0, pending_children = 0, pending_controls = 0;
  };
  Stats stats();
  // For the debug dump (agent.h, DebugDump): the RRefs owned here (value
  // ready or not, local handles, the forks the owner knows and who holds
  // each), the forks held here (owner, parent, confirmed), the children
  // forked and not confirmed yet (G2), and the control messages not
  // acknowledged yet. Workers are named through `names` (id -> name; an id
  // it lacks reads "#<id>").
  nlohmann::json DebugDump(const std::map<uint64_t, std::string>& names);

 private:
  friend class RRefHandle;
  struct OwnerState {
    std::shared_ptr<Value> value;
    bool ready = false;
    Status status;
    std::map<wire::Guid, uint64_t> forks;  // fork -> holder
    uint64_t local_handles = 0;
    std::vector<ValueCallback> waiters;
  };
  struct UserState {
    uint64_t owner = 0;
    uint64_t parent = 0;  // who forked it to us (self for remote())
    bool confirmed = false;
    bool handle_alive = true;
    uint64_t pending_children = 0;
  };
  struct PendingChild {
    wire::Guid rref;
    wire::Guid parent_fork;
    uint64_t to = 0;
  };
  struct PendingControl {
    uint64_t to = 0;
    wire::Control msg;
    std::chrono::steady_clock::time_point sent;
  };
  using UserKey = std::pair<wire::Guid, wire::Guid>;  // (rref, fork)
  struct Out {  // sends collected under the lock, made after it
    std::vector<std::pair<uint64_t, wire::Control>> controls;
    std::vector<std::pair<uint64_t, uint64_t>> acks;
    std::vector<std::pair<ValueCallback, std::pair<Status, std::shared_ptr<Value>>>>
        callbacks;
    // Values of deleted OwnerRRefs: destroyed after the lock is released,
    // because a value may hold RRef handles whose release takes the lock.
    std::vector<std::shared_ptr<Value>> garbage;
  };

  wire::Guid NewGuid();
  void HandleReleased(const RRefHandle& h);
  void SendControl(uint64_t to, wire::Control c, Out* out);
  void MaybeDeleteOwner(const wire::Guid& rref, Out* out);
  void MaybeDeleteUser(const UserKey& key, Out* out);
  // The child fork is confirmed (or will never be): its parent may go (G2).
  void ReleasePendingChild(const wire::Guid& child_fork, Out* out);
  void Flush(Out* out);

  Hooks hooks_;
  std::mutex mu_;
  uint64_t self_ = 0;
  uint64_t next_local_ = 1;
  bool shut_down_ = false;
  std::map<wire::Guid, OwnerState> owners_;
  std::map<UserKey, UserState> users_;
  std::map<wire::Guid, PendingChild> pending_children_;  // by child fork
  std::map<std::pair<uint64_t, uint64_t>, PendingControl> pending_controls_;
  std::map<uint64_t, uint64_t> next_control_id_;  // per destination
  // Deduplication per sender incarnation: ids <= floor seen, and `above`.
  struct Seen {
    uint64_t incarnation = 0;
    uint64_t floor = 0;
    std::set<uint64_t> above;
  };
  std::map<uint64_t, Seen> seen_;
  std::set<uint64_t> gone_;
};

}  // namespace ferry
