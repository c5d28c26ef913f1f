// The RRef protocol (rref_context.h, docs/protocol.md).
#include "rref/rref_context.h"

#include "common/log.h"

#include <nlohmann/json.hpp>

namespace ferry {
namespace {
constexpr const char* kLog = "rref";
}

RRefHandle::~RRefHandle() {
  if (ctx_) ctx_->HandleReleased(*this);
}

RRefContext::RRefContext(Hooks hooks) : hooks_(std::move(hooks)) {}

void RRefContext::SetSelf(uint64_t id) {
  std::lock_guard<std::mutex> l(mu_);
  self_ = id;
}

wire::Guid RRefContext::NewGuid() {
  return wire::Guid{self_, next_local_++};
}

std::shared_ptr<RRefHandle> RRefContext::CreateOwned(std::shared_ptr<Value> value) {
  std::lock_guard<std::mutex> l(mu_);
  const wire::Guid id = NewGuid();
  OwnerState& s = owners_[id];
  s.value = std::move(value);
  s.ready = true;
  s.local_handles = 1;
  return std::shared_ptr<RRefHandle>(
      new RRefHandle(shared_from_this(), id, wire::Guid{}, self_, true));
}

std::shared_ptr<RRefHandle> RRefContext::CreateForRemote(uint64_t owner) {
  std::lock_guard<std::mutex> l(mu_);
  const wire::Guid rref = NewGuid();
  const wire::Guid fork = NewGuid();
  UserState& u = users_[{rref, fork}];
  u.owner = owner;
  u.parent = self_;
  return std::shared_ptr<RRefHandle>(
      new RRefHandle(shared_from_this(), rref, fork, owner, false));
}

void RRefContext::ConfirmRemote(const wire::Guid& rref, const wire::Guid& fork) {
  Out out;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = users_.find({rref, fork});
    if (it == users_.end() || it->second.confirmed) return;
    it->second.confirmed = true;
    MaybeDeleteUser(it->first, &out);
  }
  Flush(&out);
}

void RRefContext::AbandonRemote(const wire::Guid& rref, const wire::Guid& fork) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = users_.find({rref, fork});
  if (it == users_.end()) return;
  // The owner never heard of it: nothing to tell anyone when it goes.
  it->second.owner = 0;
  it->second.confirmed = true;
  if (!it->second.handle_alive && it->second.pending_children == 0) users_.erase(it);
}

void RRefContext::OwnerAddFork(const wire::Guid& rref, const wire::Guid& fork,
                               uint64_t holder) {
  std::lock_guard<std::mutex> l(mu_);
  if (shut_down_ || gone_.count(holder)) return;
  owners_[rref].forks[fork] = holder;
}

void RRefContext::OwnerSetValue(const wire::Guid& rref, Status status,
                                std::shared_ptr<Value> value) {
  Out out;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = owners_.find(rref);
    if (it == owners_.end()) return;  // every user went away meanwhile
    OwnerState& s = it->second;
    out.garbage.push_back(std::move(s.value));
    s.value = std::move(value);
    s.status = std::move(status);
    s.ready = true;
    for (auto& w : s.waiters) {
      out.callbacks.push_back({std::move(w), {s.status, s.value}});
    }
    s.waiters.clear();
    MaybeDeleteOwner(rref, &out);
  }
  Flush(&out);
}

void RRefContext::WhenReady(const wire::Guid& rref, ValueCallback done) {
  Status status;
  std::shared_ptr<Value> value;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = owners_.find(rref);
    if (it == owners_.end() && (rref.worker == self_ || gone_.count(rref.worker))) {
      // We created it (so it existed and was deleted), or its creator is
      // gone (its remote() will never come).
      status = Status(FERRY_NOT_FOUND, "RRef " + rref.ToString() +
                                           " is not owned by this worker "
                                           "(deleted after its last user released it?)");
    } else if (it == owners_.end()) {
      // The remote() that creates it may arrive after this fetch: messages
      // between two workers are not ordered. A user holding a fork keeps the
      // value alive (G1, G2), so an unknown RRef is one still to come.
      owners_[rref].waiters.push_back(std::move(done));
      return;
    } else if (!it->second.ready) {
      it->second.waiters.push_back(std::move(done));
      return;
    } else {
      status = it->second.status;
      value = it->second.value;
    }
  }
  done(status, value);
}

bool RRefContext::IsReady(const wire::Guid& rref) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = owners_.find(rref);
  return it == owners_.end() || it->second.ready;
}

bool RRefHandle::confirmed_by_owner() const {
  return ctx_->ConfirmedByOwner(*this);
}

bool RRefContext::ConfirmedByOwner(const RRefHandle& h) {
  if (h.is_owner()) return true;
  std::lock_guard<std::mutex> l(mu_);
  auto it = users_.find(UserKey{h.rref_id(), h.fork_id()});
  return it != users_.end() && it->second.confirmed;
}

StatusOr<std::shared_ptr<Value>> RRefContext::OwnedValue(const wire::Guid& rref) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = owners_.find(rref);
  if (it == owners_.end()) return Status(FERRY_NOT_FOUND, "no such owned RRef");
  if (!it->second.ready) return Status(FERRY_UNAVAILABLE, "value not computed yet");
  if (!it->second.status.ok()) return it->second.status;
  return it->second.value;
}

Status RRefContext::SetOwnedValue(const wire::Guid& rref, std::shared_ptr<Value> v) {
  std::shared_ptr<Value> old;  // destroyed after the lock
  std::lock_guard<std::mutex> l(mu_);
  auto it = owners_.find(rref);
  if (it == owners_.end()) return Status(FERRY_NOT_FOUND, "no such owned RRef");
  old = std::move(it->second.value);
  it->second.value = std::move(v);
  it->second.status = Status::Ok();
  it->second.ready = true;
  return Status::Ok();
}

StatusOr<wire::RRefRef> RRefContext::Fork(const RRefHandle& h, uint64_t to) {
  std::lock_guard<std::mutex> l(mu_);
  if (shut_down_) return Status(FERRY_CANCELLED, "the worker is shutting down");
  wire::RRefRef ref;
  ref.owner = h.owner();
  ref.rref = h.rref_id();
  ref.fork = NewGuid();
  ref.parent = self_;
  if (log::Enabled(FERRY_LOG_TRACE)) {
    log::Write(FERRY_LOG_TRACE, kLog,
               "worker " + std::to_string(self_) + " forks " + ref.rref.ToString() +
                   " as " + ref.fork.ToString() + " to " + std::to_string(to));
  }
  if (h.is_owner()) {
    // Owner -> user: the owner knows the fork at once (scenario 3).
    owners_[ref.rref].forks[ref.fork] = to;
    return ref;
  }
  auto it = users_.find({h.rref_id(), h.fork_id()});
  if (it == users_.end()) {
    return Status(FERRY_FAILED_PRECONDITION,
                  "RRef " + h.rref_id().ToString() + " was released on this worker");
  }
  if (it->second.owner == 0) {
    return Status(FERRY_FAILED_PRECONDITION, "RRef " + h.rref_id().ToString() +
                                                 " was never created: its "
                                                 "remote() call did not reach the owner");
  }
  // User -> owner or user -> user: hold the parent until the child is
  // confirmed (G2).
  pending_children_[ref.fork] = PendingChild{ref.rref, h.fork_id(), to};
  ++it->second.pending_children;
  return ref;
}

void RRefContext::ForkAborted(const wire::RRefRef& ref) {
  Out out;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (ref.owner == self_) {
      auto it = owners_.find(ref.rref);
      if (it != owners_.end()) {
        it->second.forks.erase(ref.fork);
        MaybeDeleteOwner(ref.rref, &out);
      }
    } else {
      ReleasePendingChild(ref.fork, &out);
    }
  }
  Flush(&out);
}

std::shared_ptr<RRefHandle> RRefContext::Receive(uint64_t from,
                                                 const wire::RRefRef& ref) {
  Out out;
  std::shared_ptr<RRefHandle> h;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (log::Enabled(FERRY_LOG_TRACE)) {
      log::Write(FERRY_LOG_TRACE, kLog,
                 "worker " + std::to_string(self_) + " receives rref " +
                     ref.rref.ToString() + " fork " + ref.fork.ToString() + " owner " +
                     std::to_string(ref.owner) + " parent " + std::to_string(ref.parent));
    }
    if (ref.owner == self_) {
      // Our own RRef came back (scenarios 1 and 2): a local handle. If a
      // user sent it, that user holds its fork for us until we accept.
      ++owners_[ref.rref].local_handles;
      if (ref.parent != self_) {
        SendControl(
            ref.parent,
            wire::Control{0, wire::ControlKind::kChildAccept, ref.rref, ref.fork, 0},
            &out);
      }
      h.reset(new RRefHandle(shared_from_this(), ref.rref, wire::Guid{}, self_, true));
    } else {
      UserState& u = users_[{ref.rref, ref.fork}];
      u.owner = ref.owner;
      u.parent = ref.parent;
      u.confirmed = ref.parent == ref.owner;  // forked by the owner itself
      if (gone_.count(ref.owner)) {
        u.confirmed = true;  // nobody to confirm or tell
      } else if (!u.confirmed) {
        SendControl(
            ref.owner,
            wire::Control{0, wire::ControlKind::kForkRequest, ref.rref, ref.fork, self_},
            &out);
      }
      h.reset(new RRefHandle(shared_from_this(), ref.rref, ref.fork, ref.owner, false));
    }
    (void)from;
  }
  Flush(&out);
  return h;
}

void RRefContext::OnControl(uint64_t from, uint64_t from_incarnation,
                            const wire::Control& c) {
  Out out;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (log::Enabled(FERRY_LOG_TRACE)) {
      log::Write(FERRY_LOG_TRACE, kLog,
                 "worker " + std::to_string(self_) + " control " +
                     std::to_string(static_cast<int>(c.kind)) + " id " +
                     std::to_string(c.control_id) + " from " + std::to_string(from) +
                     " rref " + c.rref.ToString() + " fork " + c.fork.ToString());
    }
    out.acks.push_back({from, c.control_id});
    Seen& seen = seen_[from];
    if (seen.incarnation != from_incarnation) seen = Seen{from_incarnation, 0, {}};
    const bool duplicate =
        c.control_id <= seen.floor || !seen.above.insert(c.control_id).second;
    while (!seen.above.empty() && *seen.above.begin() == seen.floor + 1) {
      seen.above.erase(seen.above.begin());
      ++seen.floor;
    }
    if (duplicate || shut_down_) {
      // Acknowledge again (the first ack may have been lost); change nothing.
    } else if (c.kind == wire::ControlKind::kForkRequest) {
      if (gone_.count(c.holder) == 0) {
        owners_[c.rref].forks[c.fork] = c.holder;
        SendControl(c.holder,
                    wire::Control{0, wire::ControlKind::kOwnerAck, c.rref, c.fork, 0},
                    &out);
      }
    } else if (c.kind == wire::ControlKind::kOwnerAck) {
      auto it = users_.find({c.rref, c.fork});
      if (it != users_.end() && !it->second.confirmed) {
        it->second.confirmed = true;
        if (it->second.parent != self_ && it->second.parent != it->second.owner) {
          SendControl(
              it->second.parent,
              wire::Control{0, wire::ControlKind::kChildAccept, c.rref, c.fork, 0}, &out);
        }
        MaybeDeleteUser(it->first, &out);
      }
    } else if (c.kind == wire::ControlKind::kChildAccept) {
      ReleasePendingChild(c.fork, &out);
    } else if (c.kind == wire::ControlKind::kUserDelete) {
      auto it = owners_.find(c.rref);
      if (it != owners_.end()) {
        it->second.forks.erase(c.fork);
        MaybeDeleteOwner(c.rref, &out);
      }
    }
  }
  Flush(&out);
}

void RRefContext::OnControlAck(uint64_t from, uint64_t control_id) {
  std::lock_guard<std::mutex> l(mu_);
  pending_controls_.erase({from, control_id});
}

void RRefContext::Retry(std::chrono::milliseconds after) {
  Out out;
  {
    std::lock_guard<std::mutex> l(mu_);
    const auto now = std::chrono::steady_clock::now();
    for (auto& [key, p] : pending_controls_) {
      if (now - p.sent >= after) {
        p.sent = now;
        out.controls.push_back({p.to, p.msg});
      }
    }
  }
  for (auto& [to, c] : out.controls) hooks_.send_control(to, c);
}

void RRefContext::OnPeerGone(uint64_t id) {
  Out out;
  {
    std::lock_guard<std::mutex> l(mu_);
    gone_.insert(id);
    // Owner: forks held by the dead worker no longer count.
    std::vector<wire::Guid> touched;
    for (auto& [rref, s] : owners_) {
      for (auto it = s.forks.begin(); it != s.forks.end();) {
        it = it->second == id ? s.forks.erase(it) : std::next(it);
      }
      touched.push_back(rref);
    }
    for (const auto& r : touched) MaybeDeleteOwner(r, &out);
    // Placeholders waiting for a remote() from the dead worker: it will
    // never come; fail their waiters and forget them.
    for (auto it = owners_.begin(); it != owners_.end();) {
      OwnerState& st = it->second;
      if (!st.ready && it->first.worker == id && st.forks.empty() &&
          st.local_handles == 0) {
        for (auto& w : st.waiters) {
          out.callbacks.push_back(
              {std::move(w),
               {Status(FERRY_PEER_GONE, "the worker that created RRef " +
                                            it->first.ToString() + " is gone"),
                nullptr}});
        }
        it = owners_.erase(it);
      } else {
        ++it;
      }
    }
    // Children sent to it will never be accepted, and children of RRefs it
    // owned will never be confirmed: release their parents (G2 is moot).
    for (auto it = pending_children_.begin(); it != pending_children_.end();) {
      auto parent_state = users_.find({it->second.rref, it->second.parent_fork});
      const bool owner_gone =
          parent_state != users_.end() && parent_state->second.owner == id;
      if (it->second.to != id && !owner_gone) {
        ++it;
        continue;
      }
      const UserKey parent{it->second.rref, it->second.parent_fork};
      it = pending_children_.erase(it);
      auto u = users_.find(parent);
      if (u != users_.end()) {
        --u->second.pending_children;
        MaybeDeleteUser(parent, &out);
      }
    }
    // Users of RRefs it owned: nothing to confirm or to tell any more.
    std::vector<UserKey> orphans;
    for (auto& [key, u] : users_) {
      if (u.owner == id) {
        u.confirmed = true;
        orphans.push_back(key);
      } else if (u.parent == id && !u.confirmed) {
        // Our parent died: the owner still confirms us (its ack comes to
        // us); the accept we would send it is simply not sent.
        u.parent = u.owner;
      }
    }
    for (const auto& key : orphans) MaybeDeleteUser(key, &out);
    for (auto it = pending_controls_.begin(); it != pending_controls_.end();) {
      it = it->first.first == id ? pending_controls_.erase(it) : std::next(it);
    }
  }
  Flush(&out);
}

bool RRefContext::OwnerGone(uint64_t owner) {
  std::lock_guard<std::mutex> l(mu_);
  return gone_.count(owner) != 0;
}

void RRefContext::Shutdown() {
  std::lock_guard<std::mutex> l(mu_);
  shut_down_ = true;
  pending_controls_.clear();
}

void RRefContext::HandleReleased(const RRefHandle& h) {
  Out out;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (log::Enabled(FERRY_LOG_TRACE)) {
      log::Write(FERRY_LOG_TRACE, kLog,
                 "worker " + std::to_string(self_) + " releases " +
                     (h.is_owner() ? "owner" : "user") + " handle of " +
                     h.rref_id().ToString() + " fork " + h.fork_id().ToString());
    }
    if (h.is_owner()) {
      auto it = owners_.find(h.rref_id());
      if (it != owners_.end() && it->second.local_handles > 0) {
        --it->second.local_handles;
        MaybeDeleteOwner(h.rref_id(), &out);
      }
    } else {
      const UserKey key{h.rref_id(), h.fork_id()};
      auto it = users_.find(key);
      if (it != users_.end()) {
        it->second.handle_alive = false;
        MaybeDeleteUser(key, &out);
      }
    }
  }
  Flush(&out);
}

void RRefContext::SendControl(uint64_t to, wire::Control c, Out* out) {
  if (shut_down_ && c.kind != wire::ControlKind::kUserDelete) return;
  c.control_id = ++next_control_id_[to];
  pending_controls_[{to, c.control_id}] =
      PendingControl{to, c, std::chrono::steady_clock::now()};
  out->controls.push_back({to, c});
}

void RRefContext::MaybeDeleteOwner(const wire::Guid& rref, Out* out) {
  auto it = owners_.find(rref);
  if (it == owners_.end()) return;
  OwnerState& s = it->second;
  if (s.ready && s.forks.empty() && s.local_handles == 0 && s.waiters.empty()) {
    FERRY_LOG(
        FERRY_LOG_DEBUG, kLog,
        "worker " + std::to_string(self_) + " deletes OwnerRRef " + rref.ToString());
    out->garbage.push_back(std::move(s.value));  // freed after the lock
    owners_.erase(it);
  }
}

void RRefContext::ReleasePendingChild(const wire::Guid& child_fork, Out* out) {
  auto pc = pending_children_.find(child_fork);
  if (pc == pending_children_.end()) return;  // released already (idempotent)
  const UserKey parent{pc->second.rref, pc->second.parent_fork};
  pending_children_.erase(pc);
  auto u = users_.find(parent);
  if (u != users_.end()) {
    --u->second.pending_children;
    MaybeDeleteUser(parent, out);
  }
}

void RRefContext::MaybeDeleteUser(const UserKey& key, Out* out) {
  auto it = users_.find(key);
  if (it == users_.end()) return;
  UserState& u = it->second;
  if (u.handle_alive || u.pending_children != 0 || !u.confirmed) return;
  if (u.owner != 0 && gone_.count(u.owner) == 0) {
    SendControl(
        u.owner,
        wire::Control{0, wire::ControlKind::kUserDelete, key.first, key.second, 0},
        out);  // G1
  }
  users_.erase(it);
}

void RRefContext::Flush(Out* out) {
  for (auto& [to, c] : out->controls) hooks_.send_control(to, c);
  for (auto& [to, id] : out->acks) hooks_.send_ack(to, id);
  for (auto& [cb, args] : out->callbacks) cb(args.first, args.second);
  out->controls.clear();
  out->acks.clear();
  out->callbacks.clear();
  out->garbage.clear();  // deleted values (and the handles they held) go
}

RRefContext::Stats RRefContext::stats() {
  std::lock_guard<std::mutex> l(mu_);
  Stats s;
  s.owned = owners_.size();
  s.users = users_.size();
  s.pending_children = pending_children_.size();
  s.pending_controls = pending_controls_.size();
  return s;
}

nlohmann::json RRefContext::DebugDump(const std::map<uint64_t, std::string>& names) {
  auto who = [&](uint64_t id) {
    auto it = names.find(id);
    return it != names.end() && !it->second.empty() ? it->second
                                                    : "#" + std::to_string(id);
  };
  static const char* const kKinds[] = {"?", "fork request", "owner ack", "child accept",
                                       "user delete"};
  const auto now = std::chrono::steady_clock::now();
  nlohmann::json owned = nlohmann::json::array(), held = nlohmann::json::array(),
                 children = nlohmann::json::array(), controls = nlohmann::json::array();
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [rref, o] : owners_) {
    nlohmann::json forks = nlohmann::json::array();
    for (const auto& [fork, holder] : o.forks) {
      forks.push_back({{"fork", fork.ToString()}, {"holder", who(holder)}});
    }
    owned.push_back(
        {{"rref", rref.ToString()},
         {"value", o.ready ? (o.status.ok() ? "ready" : "failed") : "being computed"},
         {"local_handles", o.local_handles},
         {"users", std::move(forks)},
         {"waiting_for_value", o.waiters.size()}});
  }
  for (const auto& [key, u] : users_) {
    held.push_back({{"rref", key.first.ToString()},
                    {"fork", key.second.ToString()},
                    {"owner", who(u.owner)},
                    {"forked_by", who(u.parent)},
                    {"confirmed_by_owner", u.confirmed},
                    {"handle_alive", u.handle_alive},
                    {"pending_children", u.pending_children}});
  }
  for (const auto& [fork, c] : pending_children_) {
    children.push_back({{"rref", c.rref.ToString()},
                        {"child_fork", fork.ToString()},
                        {"parent_fork", c.parent_fork.ToString()},
                        {"sent_to", who(c.to)}});
  }
  for (const auto& [key, c] : pending_controls_) {
    const auto kind = static_cast<size_t>(c.msg.kind);
    controls.push_back(
        {{"to", who(c.to)},
         {"control_id", c.msg.control_id},
         {"kind", kind < sizeof kKinds / sizeof kKinds[0] ? kKinds[kind] : "?"},
         {"rref", c.msg.rref.ToString()},
         {"last_sent_ms_ago",
          std::chrono::duration_cast<std::chrono::milliseconds>(now - c.sent).count()}});
  }
  return {{"owned", std::move(owned)},
          {"held", std::move(held)},
          {"pending_children", std::move(children)},
          {"unacknowledged_controls", std::move(controls)}};
}

}  // namespace ferry
