// The embedded rendezvous store (store_server.h).
#include "membership/store_server.h"

#include "common/log.h"

namespace ferry {
namespace {
constexpr const char* kLog = "store";
}

StatusOr<wire::StoreJoined> StoreServer::Join(const wire::MemberRecord& self) {
  wire::StoreJoin join;
  join.self = self;
  join.world_size = world_size_;
  wire::StoreJoined joined = Admit(0, std::move(join));
  if (joined.status != FERRY_OK) return Status(joined.status, joined.message);
  return joined;
}

std::string StoreServer::Refusal(const wire::StoreJoin& join, int32_t* code) const {
  const wire::MemberRecord& r = join.self;
  *code = FERRY_INVALID_ARGUMENT;
  if (world_size_ == 0) {
    if (join.world_size == 0) return "";
    return "worker '" + r.name + "' names world_size " + std::to_string(join.world_size) +
           ", but this job is elastic (the worker hosting its store named none): "
           "start every worker of a job with the same world_size, or none";
  }
  if (join.world_size != world_size_) {
    return "worker '" + r.name + "' names " +
           (join.world_size == 0 ? std::string("no world_size (an elastic worker)")
                                 : "world_size " + std::to_string(join.world_size)) +
           ", but this job is static with world_size " + std::to_string(world_size_) +
           ": start every worker of a job with the same world_size";
  }
  if (r.rank < 0 || static_cast<uint32_t>(r.rank) >= world_size_) {
    return "worker '" + r.name + "' names rank " + std::to_string(r.rank) +
           ", outside 0.." + std::to_string(world_size_ - 1);
  }
  *code = FERRY_ALREADY_EXISTS;
  for (const auto& [name, e] : by_name_) {
    if (e.record.rank == r.rank) {
      return "rank " + std::to_string(r.rank) + " is already taken by worker '" + name +
             "'" + (e.alive ? "" : " (which has left; a static job's ranks join once)") +
             ": give each worker its own rank";
    }
    if (name == r.name) {
      return "a worker named '" + name + "' already joined this static job as rank " +
             std::to_string(e.record.rank) + ": give each worker its own name";
    }
  }
  return "";
}

wire::StoreJoined StoreServer::Admit(uint64_t conn, wire::StoreJoin join) {
  wire::StoreJoined reply;
  wire::MemberRecord record = std::move(join.self);
  if (world_size_ == 0) record.rank = -1;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = by_name_.find(record.name);
    if (it != by_name_.end() && it->second.alive) {
      reply.status = FERRY_ALREADY_EXISTS;
      reply.message = "a worker named '" + record.name + "' is already in the job (id " +
                      std::to_string(it->second.record.id) +
                      "): pick another name, or wait until it leaves";
      return reply;
    }
    join.self = record;
    int32_t code = FERRY_OK;
    std::string why = Refusal(join, &code);
    if (!why.empty()) {
      reply.status = code;
      reply.message = std::move(why);
      FERRY_LOG(FERRY_LOG_WARN, kLog, "join refused: " + reply.message);
      return reply;
    }
    if (it == by_name_.end()) {
      // In a static job a member's id is its rank + 1 (ids stay nonzero).
      record.id = world_size_ > 0 ? static_cast<uint64_t>(record.rank) + 1 : next_id_++;
      record.incarnation = 1;
      it = by_name_.emplace(record.name, Entry{}).first;
    } else {
      record.id = it->second.record.id;  // a name keeps its id
      record.incarnation = it->second.record.incarnation + 1;
    }
    it->second.record = record;
    it->second.conn = conn;
    it->second.alive = true;
    it->second.gone = false;
    reply.self = record;
    reply.world_size = world_size_;
    for (const auto& [name, e] : by_name_) {
      if (e.record.id == record.id) continue;
      if (e.alive) {
        reply.members.push_back(e.record);
      } else if (world_size_ > 0) {
        reply.departed.push_back(
            wire::StoreJoined::Departed{e.record, e.gone ? wire::MemberEventKind::kGone
                                                         : wire::MemberEventKind::kLeft});
      }
      if (world_size_ > 0 && e.arrived) reply.arrived.push_back(e.record.rank);
    }
  }
  FERRY_LOG(FERRY_LOG_INFO, kLog,
            "'" + record.name + "' joined as id " + std::to_string(record.id) +
                (record.rank >= 0 ? " rank " + std::to_string(record.rank) : "") +
                " incarnation " + std::to_string(record.incarnation));
  Announce(wire::MemberEventKind::kJoined, record, conn);
  return reply;
}

void StoreServer::Announce(wire::MemberEventKind kind, const wire::MemberRecord& r,
                           uint64_t except_conn, const std::string& reason) {
  std::vector<uint64_t> conns;
  bool tell_host = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [name, e] : by_name_) {
      if (!e.alive || e.record.id == r.id) continue;
      if (e.conn == 0) {
        tell_host = true;
      } else if (e.conn != except_conn) {
        conns.push_back(e.conn);
      }
    }
  }
  wire::StoreMemberEvent ev{kind, r, reason};
  for (uint64_t c : conns) {
    auto m = std::make_unique<OutMessage>();
    m->kind = wire::Kind::kStoreMemberEvent;
    wire::Writer w = m->BodyWriter();
    wire::Put(w, ev);
    hooks_.send(c, std::move(m));
  }
  if (tell_host) hooks_.local_event(ev);
}

wire::MemberRecord StoreServer::MarkDown(uint64_t conn, uint64_t id, bool gone) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& [name, e] : by_name_) {
    const bool match = conn != 0 ? e.conn == conn : e.record.id == id;
    if (match && e.alive) {
      e.alive = false;
      e.gone = gone;
      e.conn = 0;
      return e.record;
    }
  }
  return wire::MemberRecord();
}

bool StoreServer::MarkArrived(uint64_t conn, uint64_t id, wire::MemberRecord* r) {
  std::lock_guard<std::mutex> l(mu_);
  if (world_size_ == 0) return false;
  for (auto& [name, e] : by_name_) {
    const bool match = conn != 0 ? e.conn == conn : e.record.id == id;
    if (!match || !e.alive) continue;
    if (e.arrived) return false;
    e.arrived = true;
    *r = e.record;
    return true;
  }
  return false;
}

void StoreServer::Leave(uint64_t id) {
  // Only the worker hosting the store leaves through here (the others send
  // LEAVE): its members are told that the store goes with it.
  const wire::MemberRecord r = MarkDown(0, id, false);
  if (r.id != 0) Announce(wire::MemberEventKind::kLeft, r, 0, kStoreHostLeft);
}

void StoreServer::Arrive(uint64_t id) {
  wire::MemberRecord r;
  if (MarkArrived(0, id, &r)) Announce(wire::MemberEventKind::kArrived, r, 0);
}

size_t StoreServer::AliveOthers(uint64_t id) {
  std::lock_guard<std::mutex> l(mu_);
  size_t n = 0;
  for (const auto& [name, e] : by_name_) n += e.alive && e.record.id != id;
  return n;
}

void StoreServer::OnMessage(uint64_t conn, const InMessage& msg) {
  wire::Reader rd(msg.body.data(), msg.body.size());
  if (msg.envelope.kind == wire::Kind::kStoreJoin) {
    wire::StoreJoin join;
    if (!wire::Get(rd, &join) || join.self.name.empty()) {
      FERRY_LOG(FERRY_LOG_WARN, kLog, "malformed JOIN ignored");
      return;
    }
    wire::StoreJoined reply = Admit(conn, std::move(join));
    auto m = std::make_unique<OutMessage>();
    m->kind = wire::Kind::kStoreJoined;
    wire::Writer w = m->BodyWriter();
    wire::Put(w, reply);
    hooks_.send(conn, std::move(m));
    return;
  }
  if (msg.envelope.kind == wire::Kind::kStoreArrive) {
    wire::MemberRecord r;
    if (MarkArrived(conn, 0, &r)) {
      FERRY_LOG(
          FERRY_LOG_INFO, kLog,
          "'" + r.name + "' (rank " + std::to_string(r.rank) + ") reached shutdown");
      Announce(wire::MemberEventKind::kArrived, r, conn);
    }
    return;
  }
  if (msg.envelope.kind == wire::Kind::kStoreLeave) {
    const wire::MemberRecord r = MarkDown(conn, 0, false);
    if (r.id != 0) {
      FERRY_LOG(FERRY_LOG_INFO, kLog, "'" + r.name + "' left");
      Announce(wire::MemberEventKind::kLeft, r, conn);
    }
  }
}

void StoreServer::OnConnGone(uint64_t conn, const Status& why) {
  const wire::MemberRecord r = MarkDown(conn, 0, true);
  if (r.id != 0) {
    FERRY_LOG(FERRY_LOG_INFO, kLog, "'" + r.name + "' is gone: " + why.message());
    Announce(wire::MemberEventKind::kGone, r, conn, why.message());
  }
}

}  // namespace ferry
