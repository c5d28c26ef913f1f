// ferry::MemberTable: the members of the job this worker knows — by id and
// by name, each with its incarnation and state — and who wants to hear when
// one joins, leaves or is gone. It resolves the names calls are addressed
// to. What feeds it is the rendezvous store's news (store.h) and the
// engine's word that a peer is gone; it only keeps the record.
//
// Thread-safe. Callbacks run without the table's lock held, so a callback
// may read the table.
#pragma once

#include "common/status.h"

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace ferry {

enum class MemberState { kAlive = 1, kLeft = 2, kGone = 3 };

struct MemberInfo {
  uint64_t id = 0;
  uint64_t incarnation = 0;
  std::string name;
  MemberState state = MemberState::kAlive;
  std::string transport;  // "self", a plugin name, or "" (not connected)
  int32_t rank = -1;      // in a static job; -1 in an elastic one
};

class MemberTable {
 public:
  // `job`: named in resolution errors.
  explicit MemberTable(std::string job) : job_(std::move(job)) {}

  // Records `m` (this worker itself, or a member that joined) under its id
  // and name. Refused (false) when a later incarnation of that id is known.
  bool Add(const MemberInfo& m);
  // Member (id, incarnation) left or is gone: marks it and tells the
  // callbacks. Ignored unless that incarnation is known and alive.
  void SetState(uint64_t id, uint64_t incarnation, MemberState state);

  // `to` is a member name or "#<id>". The member's id; 0 for a name no
  // member has joined with yet (the caller may wait for it); NOT_FOUND for
  // an id no member has.
  StatusOr<uint64_t> Resolve(const std::string& to) const;
  // The name of member `id`, or "" if unknown.
  std::string NameOf(uint64_t id) const;
  // Member `id`'s state; kAlive for an id not known.
  MemberState StateOf(uint64_t id) const;
  // Every member known, those alive first, each group by id.
  std::vector<MemberInfo> List() const;
  size_t AliveCount() const;
  // Every member known, for error messages: "'w0' (rank 0), 'w1' (rank 1)"
  // (ranks when the job has them), by rank or id.
  std::string Describe() const;
  // The name of the member of rank `rank`, or "" if none is known.
  std::string NameOfRank(int32_t rank) const;

  using Callback = std::function<void(const MemberInfo&)>;
  // `cb` hears of every member that joins, leaves or is gone from now on.
  void OnChange(Callback cb);
  // Tells the callbacks about `m` (a join: the caller decides when).
  void Notify(const MemberInfo& m);

 private:
  const std::string job_;
  mutable std::mutex mu_;  // everything below
  std::map<uint64_t, MemberInfo> by_id_;
  std::map<std::string, uint64_t> ids_by_name_;
  std::vector<Callback> callbacks_;
};

}  // namespace ferry
