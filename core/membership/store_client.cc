// The client of an embedded store hosted by another worker (store_client.h).
#include "membership/store_client.h"

#include "common/log.h"
#include "engine/engine.h"

#include <algorithm>
#include <thread>

namespace ferry {
namespace {
// The store client is part of the worker; its log lines say so.
constexpr const char* kLog = "agent";
}  // namespace

StoreClient::StoreClient(Engine& engine, Options options, MemberEventHandler on_event)
    : engine_(engine), options_(std::move(options)), on_event_(std::move(on_event)) {}

namespace {
// How long a store may stay unreachable before the worker says that nobody
// seems to host it (it keeps trying until the join timeout).
constexpr auto kSayNobodyHostsAfter = std::chrono::seconds(2);
}  // namespace

std::string StoreClient::NobodyHostsIt(const std::string& why) const {
  return "nobody seems to host the rendezvous store of job '" + options_.job + "' at " +
         options_.address + " (" + why +
         "). One worker of each job hosts it: rank 0 of a static job, or the worker "
         "started with host_store (Python: init_rpc(..., host_store=True); C: "
         "FERRY_WORKER_HOST_STORE; C++: Options::host_store). Start that worker, or "
         "check the address";
}

StatusOr<wire::StoreJoined> StoreClient::Join(const wire::MemberRecord& self) {
  // Workers of a job are often started together, the store's host among
  // them: a store not listening yet is retried (with back-off) until the
  // join timeout, as torch's TCPStore clients do. A store that answers and
  // refuses (name taken, bad secret) is not retried. A store unreachable
  // for a few seconds is said to be so at once, with how to host one.
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + options_.join_timeout;
  auto backoff = std::chrono::milliseconds(10);
  bool said = false;
  while (true) {
    Status s = TryJoin(self, deadline);
    const bool unreachable = s.code() == FERRY_UNAVAILABLE || s.code() == FERRY_PEER_GONE;
    if (s.ok()) {
      std::lock_guard<std::mutex> l(mu_);
      return reply_;
    }
    if (!unreachable) return s;
    const auto now = std::chrono::steady_clock::now();
    if (now + backoff >= deadline) {
      return Status(s.code(), NobodyHostsIt(s.message()) +
                                  " (gave up at the join timeout, " +
                                  std::to_string(options_.join_timeout.count()) + " ms)");
    }
    if (!said && now - start >= kSayNobodyHostsAfter) {
      said = true;
      FERRY_LOG(FERRY_LOG_WARN, kLog,
                NobodyHostsIt(s.message()) + ". Still trying until the join timeout (" +
                    std::to_string(options_.join_timeout.count()) + " ms)");
    } else {
      FERRY_LOG(FERRY_LOG_DEBUG, kLog, s.message() + "; retrying");
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
    std::lock_guard<std::mutex> l(mu_);
    status_ = Status::Ok();
  }
}

Status StoreClient::TryJoin(const wire::MemberRecord& self,
                            std::chrono::steady_clock::time_point deadline) {
  auto conn = engine_.ConnectStore(options_.address);
  if (!conn.ok()) return conn.status();
  {
    std::lock_guard<std::mutex> l(mu_);
    conn_ = conn.value();
  }
  auto m = std::make_unique<OutMessage>();
  m->kind = wire::Kind::kStoreJoin;
  wire::Writer w = m->BodyWriter();
  wire::StoreJoin join;
  join.self = self;
  join.world_size = options_.world_size;
  wire::Put(w, join);
  Status s = engine_.SendOnConn(conn.value(), std::move(m));
  if (!s.ok()) return s;
  engine_.WaitUntil(
      [this] {
        std::lock_guard<std::mutex> l(mu_);
        return answered_ || !status_.ok();
      },
      deadline);
  std::lock_guard<std::mutex> l(mu_);
  if (!status_.ok()) {
    return Status(status_.code(),
                  "cannot join job '" + options_.job + "': " + status_.message());
  }
  if (!answered_) {
    return Status(FERRY_DEADLINE_EXCEEDED,
                  "the rendezvous store at " + options_.address +
                      " did not answer within " +
                      std::to_string(options_.join_timeout.count()) +
                      " ms: is the worker hosting it running and reachable?");
  }
  if (reply_.status != FERRY_OK) return Status(reply_.status, reply_.message);
  return Status::Ok();
}

void StoreClient::Leave(uint64_t /*id*/) {
  SendBare(wire::Kind::kStoreLeave);
}

void StoreClient::Arrive(uint64_t /*id*/) {
  SendBare(wire::Kind::kStoreArrive);
}

void StoreClient::SendBare(wire::Kind kind) {
  // The store knows this worker by its connection: no body.
  uint64_t conn;
  {
    std::lock_guard<std::mutex> l(mu_);
    conn = conn_;
  }
  if (conn == 0) return;
  auto m = std::make_unique<OutMessage>();
  m->kind = kind;
  engine_.SendOnConn(conn, std::move(m));
}

bool StoreClient::lost() const {
  std::lock_guard<std::mutex> l(mu_);
  return lost_;
}

void StoreClient::OnMessage(uint64_t /*conn*/, const InMessage& msg) {
  const wire::Kind kind = msg.envelope.kind;
  wire::Reader r(msg.body.data(), msg.body.size());
  if (kind == wire::Kind::kStoreJoined) {
    wire::StoreJoined reply;
    if (!wire::Get(r, &reply)) return;
    std::lock_guard<std::mutex> l(mu_);
    reply_ = std::move(reply);
    answered_ = true;
    return;
  }
  if (kind == wire::Kind::kStoreMemberEvent) {
    wire::StoreMemberEvent ev;
    if (!wire::Get(r, &ev)) return;
    if (ev.event == wire::MemberEventKind::kLeft && ev.reason == kStoreHostLeft) {
      std::lock_guard<std::mutex> l(mu_);
      host_left_ = ev.member.name;
    }
    on_event_(ev);
  }
}

void StoreClient::OnConnGone(uint64_t conn, const Status& why, bool worker_stopping) {
  bool joined;
  std::string host_left;
  {
    std::lock_guard<std::mutex> l(mu_);
    joined = answered_;
    host_left = host_left_;
    // An earlier, failed attempt's connection (Join retries) says nothing
    // about the current one; ids only grow.
    if (!joined && conn >= conn_) status_ = why;
    if (joined && conn == conn_) lost_ = true;
  }
  if (joined && !worker_stopping && !host_left.empty()) {
    // Its host left normally (it said so first): no failure.
    FERRY_LOG(FERRY_LOG_INFO, kLog,
              "the worker hosting the rendezvous store at " + options_.address + " ('" +
                  host_left +
                  "') left the job, and the store with it: the workers already known "
                  "keep working with each other; workers that join from now on are not "
                  "seen");
  } else if (joined && !worker_stopping) {
    FERRY_LOG(FERRY_LOG_WARN, kLog,
              "lost the rendezvous store at " + options_.address + " (" + why.message() +
                  "): the workers already known keep working with each other; "
                  "workers that join from now on are not seen (see docs/membership.md)");
  }
}

}  // namespace ferry
