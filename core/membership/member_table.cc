// The members this worker knows (member_table.h).
#include "membership/member_table.h"

#include <algorithm>
#include <cstdlib>

namespace ferry {

bool MemberTable::Add(const MemberInfo& m) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = by_id_.find(m.id);
  if (it != by_id_.end() && it->second.incarnation > m.incarnation) return false;
  by_id_[m.id] = m;
  ids_by_name_[m.name] = m.id;
  return true;
}

void MemberTable::SetState(uint64_t id, uint64_t incarnation, MemberState state) {
  MemberInfo info;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = by_id_.find(id);
    if (it == by_id_.end() || it->second.incarnation != incarnation ||
        it->second.state != MemberState::kAlive) {
      return;
    }
    it->second.state = state;
    info = it->second;
  }
  Notify(info);
}

StatusOr<uint64_t> MemberTable::Resolve(const std::string& to) const {
  std::lock_guard<std::mutex> l(mu_);
  if (!to.empty() && to[0] == '#') {
    char* end = nullptr;
    const uint64_t id = std::strtoull(to.c_str() + 1, &end, 10);
    if (end == to.c_str() + 1 || *end != '\0' || by_id_.count(id) == 0) {
      return Status(FERRY_NOT_FOUND,
                    "no worker with id " + to.substr(1) + " in job '" + job_ + "'");
    }
    return id;
  }
  auto it = ids_by_name_.find(to);
  if (it == ids_by_name_.end()) return uint64_t{0};  // not joined yet: wait
  return it->second;
}

std::string MemberTable::NameOf(uint64_t id) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = by_id_.find(id);
  return it == by_id_.end() ? std::string() : it->second.name;
}

MemberState MemberTable::StateOf(uint64_t id) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = by_id_.find(id);
  return it == by_id_.end() ? MemberState::kAlive : it->second.state;
}

std::vector<MemberInfo> MemberTable::List() const {
  std::vector<MemberInfo> out;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [id, m] : by_id_) out.push_back(m);
  }
  std::stable_sort(out.begin(), out.end(), [](const MemberInfo& a, const MemberInfo& b) {
    return (a.state == MemberState::kAlive) > (b.state == MemberState::kAlive);
  });
  return out;
}

size_t MemberTable::AliveCount() const {
  std::lock_guard<std::mutex> l(mu_);
  size_t k = 0;
  for (const auto& [id, m] : by_id_) k += m.state == MemberState::kAlive;
  return k;
}

std::string MemberTable::Describe() const {
  std::vector<MemberInfo> all;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [id, m] : by_id_) all.push_back(m);
  }
  std::stable_sort(all.begin(), all.end(), [](const MemberInfo& a, const MemberInfo& b) {
    return a.rank < b.rank;
  });
  std::string out;
  for (const auto& m : all) {
    if (!out.empty()) out += ", ";
    out += "'" + m.name + "'";
    if (m.rank >= 0) out += " (rank " + std::to_string(m.rank) + ")";
  }
  return out;
}

std::string MemberTable::NameOfRank(int32_t rank) const {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [id, m] : by_id_) {
    if (m.rank == rank) return m.name;
  }
  return "";
}

void MemberTable::OnChange(Callback cb) {
  std::lock_guard<std::mutex> l(mu_);
  callbacks_.push_back(std::move(cb));
}

void MemberTable::Notify(const MemberInfo& m) {
  std::vector<Callback> cbs;
  {
    std::lock_guard<std::mutex> l(mu_);
    cbs = callbacks_;
  }
  for (auto& cb : cbs) cb(m);
}

}  // namespace ferry
