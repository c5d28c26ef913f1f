// The embedded rendezvous store (store_server.h).
#include "membership/store_server.h"

#include "common/log.h"

namespace ferry {
namespace {
constexpr const char* kLog = "store";
}

StatusOr<wire::StoreJoined> StoreServer::Join(const wire::MemberRecord& self) {
  wire::StoreJoined joined = Admit(0, self);
  if (joined.status != FERRY_OK) return Status(joined.status, joined.message);
  return joined;
}

wire::StoreJoined StoreServer::Admit(uint64_t conn, wire::MemberRecord record) {
  wire::StoreJoined reply;
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
    if (it == by_name_.end()) {
      record.id = next_id_++;
      record.incarnation = 1;
      it = by_name_.emplace(record.name, Entry{}).first;
    } else {
      record.id = it->second.record.id;  // a name keeps its id
      record.incarnation = it->second.record.incarnation + 1;
    }
    it->second.record = record;
    it->second.conn = conn;
    it->second.alive = true;
    reply.self = record;
    for (const auto& [name, e] : by_name_) {
      if (e.alive && e.record.id != record.id) reply.members.push_back(e.record);
    }
  }
  FERRY_LOG(FERRY_LOG_INFO, kLog,
            "'" + record.name + "' joined as id " + std::to_string(record.id) +
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
    w.U8(static_cast<uint8_t>(kind));
    wire::Put(w, r);
    w.Str(reason);
    hooks_.send(c, std::move(m));
  }
  if (tell_host) hooks_.local_event(ev);
}

wire::MemberRecord StoreServer::MarkDown(uint64_t conn, uint64_t id) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& [name, e] : by_name_) {
    const bool match = conn != 0 ? e.conn == conn : e.record.id == id;
    if (match && e.alive) {
      e.alive = false;
      e.conn = 0;
      return e.record;
    }
  }
  return wire::MemberRecord();
}

void StoreServer::Leave(uint64_t id) {
  const wire::MemberRecord r = MarkDown(0, id);
  if (r.id != 0) Announce(wire::MemberEventKind::kLeft, r, 0);
}

void StoreServer::OnMessage(uint64_t conn, const InMessage& msg) {
  wire::Reader rd(msg.body.data(), msg.body.size());
  if (msg.envelope.kind == wire::Kind::kStoreJoin) {
    wire::MemberRecord record;
    if (!wire::Get(rd, &record) || record.name.empty()) {
      FERRY_LOG(FERRY_LOG_WARN, kLog, "malformed JOIN ignored");
      return;
    }
    wire::StoreJoined reply = Admit(conn, std::move(record));
    auto m = std::make_unique<OutMessage>();
    m->kind = wire::Kind::kStoreJoined;
    wire::Writer w = m->BodyWriter();
    wire::Put(w, reply);
    hooks_.send(conn, std::move(m));
    return;
  }
  if (msg.envelope.kind == wire::Kind::kStoreLeave) {
    const wire::MemberRecord r = MarkDown(conn, 0);
    if (r.id != 0) {
      FERRY_LOG(FERRY_LOG_INFO, kLog, "'" + r.name + "' left");
      Announce(wire::MemberEventKind::kLeft, r, conn);
    }
  }
}

void StoreServer::OnConnGone(uint64_t conn, const Status& why) {
  const wire::MemberRecord r = MarkDown(conn, 0);
  if (r.id != 0) {
    FERRY_LOG(FERRY_LOG_INFO, kLog, "'" + r.name + "' is gone: " + why.message());
    Announce(wire::MemberEventKind::kGone, r, conn, why.message());
  }
}

}  // namespace ferry
