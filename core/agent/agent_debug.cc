// Agent::DebugDump (agent.h): what a worker is doing, for a person finding
// out why a job hangs (docs/debugging.md). Each part dumps itself under its
// own lock; this file assembles them, never holding two locks at once, and
// reads the result for what the worker is blocked on.
#include "agent/agent.h"

#include "common/log.h"

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <ctime>

namespace ferry {
namespace {

constexpr const char* kLog = "debug";

std::string Ms(int64_t ms) {
  return ms % 1000 == 0 || ms >= 10000 ? std::to_string(ms / 1000) + " s"
                                       : std::to_string(ms) + " ms";
}

std::string WallClockNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

const char* StateName(MemberState s) {
  switch (s) {
    case MemberState::kAlive:
      return "alive";
    case MemberState::kLeft:
      return "left";
    case MemberState::kGone:
      return "gone";
  }
  return "?";
}

// "handler 'f' (called by 'w0')" for a served call's record.
std::string Handler(const nlohmann::json& made_by) {
  return "handler '" + made_by["function"].get<std::string>() + "' (called by '" +
         made_by["caller"].get<std::string>() + "')";
}

// One line per call this worker waits for or serves, in words; nested
// calls are named with the handler that made them, and a running handler
// with a nested call pending is not named twice.
void DescribeCalls(const nlohmann::json& outgoing, const nlohmann::json& incoming,
                   nlohmann::json* lines) {
  std::set<std::pair<std::string, uint64_t>> waiting_handlers;
  for (const auto& c : outgoing) {
    if (c["function"] == Agent::kDebugDumpFunction) continue;  // a debugger's
    const std::string target =
        c["to"].get<std::string>() + "." + c["function"].get<std::string>();
    const std::string age = Ms(c["age_ms"].get<int64_t>());
    std::string line;
    if (c.contains("made_by")) {
      const auto& by = c["made_by"];
      waiting_handlers.emplace(by["caller"].get<std::string>(),
                               by["call_id"].get<uint64_t>());
      line = Handler(by) + " waits on its call to " + target;
    } else {
      line = "a call to " + target + " waits";
    }
    if (c["to_id"].get<uint64_t>() == 0) {
      line += " for a worker named '" + c["to"].get<std::string>() + "' to join";
    } else {
      line += " for its reply";
    }
    line +=
        " (for " + age + ", deadline in " + Ms(c["deadline_in_ms"].get<int64_t>()) + ")";
    lines->push_back(line);
  }
  for (const auto& c : incoming["calls"]) {
    if (c["function"] == Agent::kDebugDumpFunction) continue;  // this dump
    const std::string caller = c["caller"].get<std::string>();
    if (waiting_handlers.count({caller, c["call_id"].get<uint64_t>()})) continue;
    const std::string what =
        "'" + c["function"].get<std::string>() + "' (called by '" + caller + "')";
    const std::string state = c["state"].get<std::string>();
    if (state == "queued") {
      lines->push_back("a call of " + what + " is queued for a thread, for " +
                       Ms(c["age_ms"].get<int64_t>()));
    } else if (state == "running") {
      lines->push_back("handler " + what + " is running, for " +
                       Ms(c["running_ms"].get<int64_t>()));
    } else {
      lines->push_back("a call of " + what + " is not answered: its handler returned " +
                       "and the application answers it later (for " +
                       Ms(c["age_ms"].get<int64_t>()) + ")");
    }
  }
}

}  // namespace

std::map<uint64_t, std::string> Agent::NamesById() {
  std::map<uint64_t, std::string> names;
  for (const MemberInfo& m : members_.List()) names[m.id] = m.name;
  return names;
}

nlohmann::json Agent::DumpWorker() {
  return {{"name", options_.name},
          {"job", options_.job},
          {"id", self_.id},
          {"incarnation", self_.incarnation},
          {"rank", self_.rank},
          {"world_size", options_.world_size},
          {"pid", static_cast<int64_t>(getpid())},
          {"store", store_address_},
          {"hosts_store", store_server_ != nullptr},
          {"state", stopped_.load()         ? "left"
                    : shutting_down_.load() ? "shutting down"
                    : started_.load()       ? "running"
                                            : "starting"}};
}

nlohmann::json Agent::DumpJob() {
  if (options_.world_size == 0) return nullptr;
  std::set<int32_t> joined, arrived;
  Status broken;
  {
    std::lock_guard<std::mutex> l(job_mu_);
    joined = joined_ranks_;
    arrived = arrived_ranks_;
    broken = barrier_broken_;
  }
  auto missing = [this](const std::set<int32_t>& have) {
    nlohmann::json out = nlohmann::json::array();
    for (int32_t r = 0; r < static_cast<int32_t>(options_.world_size); ++r) {
      if (!have.count(r)) out.push_back({{"rank", r}, {"name", members_.NameOfRank(r)}});
    }
    return out;
  };
  nlohmann::json job = {{"joined_ranks", joined},
                        {"not_joined", missing(joined)},
                        {"arrived_at_shutdown", arrived},
                        {"not_arrived_at_shutdown", missing(arrived)},
                        {"this_worker_arrived", arrived.count(self_.rank) != 0}};
  job["barrier_broken"] =
      broken.ok() ? nlohmann::json(nullptr) : nlohmann::json(broken.message());
  return job;
}

nlohmann::json Agent::DebugDump() {
  nlohmann::json d;
  d["time"] = WallClockNow();
  d["worker"] = DumpWorker();
  const std::map<uint64_t, std::string> names = NamesById();
  nlohmann::json members = nlohmann::json::array();
  for (const MemberInfo& m : members_.List()) {
    members.push_back({{"name", m.name},
                       {"id", m.id},
                       {"rank", m.rank},
                       {"state", StateName(m.state)}});
  }
  d["members"] = std::move(members);
  d["outgoing_calls"] = calls_ ? calls_->DebugDump() : nlohmann::json::array();
  d["incoming_calls"] = incoming_ ? incoming_->DebugDump() : nlohmann::json::object();
  if (!d["incoming_calls"].contains("calls")) {
    d["incoming_calls"]["calls"] = nlohmann::json::array();
  }
  d["rrefs"] = rrefs_ ? rrefs_->DebugDump(names) : nlohmann::json::object();
  d["engine"] = engine_ ? engine_->DebugDump() : nlohmann::json::object();
  d["static_job"] = DumpJob();
  // The limits (docs/limits.md) and how close the worker is to them.
  const Limits& limits = options_.limits;
  d["limits"] = {
      {"max_message_size", limits.max_message_size},
      {"max_calls_in_flight_per_peer", limits.max_calls_in_flight_per_peer},
      {"max_queued_bytes_per_connection", limits.max_queued_bytes_per_connection},
      {"max_queued_calls", limits.max_queued_calls},
      {"max_connections", limits.max_connections},
      {"handshake_timeout_ms", limits.handshake_timeout.count() > 0
                                   ? limits.handshake_timeout.count()
                                   : options_.peer_timeout.count()},
      {"calls_queued_here", incoming_ ? incoming_->queued() : 0u},
      {"calls_refused_here", incoming_ ? incoming_->refused() : uint64_t{0}},
      {"calls_waiting_for_room",
       calls_ ? calls_->WaitingForRoom() : nlohmann::json::array()},
  };

  // What it is blocked on, in words: the application's wait first, then
  // the calls.
  nlohmann::json lines = nlohmann::json::array();
  const nlohmann::json& job = d["static_job"];
  auto ranks = [&job](const char* which) {
    if (!job.is_object()) return std::string("?");
    std::string out;
    const nlohmann::json& list = job[which];
    for (const auto& r : list) {
      if (!out.empty()) out += ", ";
      const std::string name = r["name"].get<std::string>();
      out += name.empty()
                 ? "rank " + std::to_string(r["rank"].get<int>())
                 : "'" + name + "' (rank " + std::to_string(r["rank"].get<int>()) + ")";
    }
    return out;
  };
  switch (waiting_.load()) {
    case Waiting::kNothing:
      break;
    case Waiting::kStart:
      lines.push_back("the static job's start waits for " + ranks("not_joined") +
                      " to join");
      break;
    case Waiting::kWorkers:
      lines.push_back("wait_for_workers waits for " +
                      std::to_string(waiting_for_.load()) + " live workers (" +
                      std::to_string(members_.AliveCount()) + " now)");
      break;
    case Waiting::kOwnCalls:
      lines.push_back("shutdown waits for this worker's own " +
                      std::to_string(d["outgoing_calls"].size()) +
                      " pending calls (and unacknowledged RRef messages) before it "
                      "reaches the job-wide barrier");
      break;
    case Waiting::kBarrier:
      lines.push_back("the shutdown barrier waits for " +
                      ranks("not_arrived_at_shutdown"));
      break;
    case Waiting::kServing:
      lines.push_back("shutdown waits for the " +
                      std::to_string(d["incoming_calls"]["calls"].size()) +
                      " calls this worker serves to be answered");
      break;
  }
  for (const auto& w : d["limits"]["calls_waiting_for_room"]) {
    lines.push_back(std::to_string(w["waiting"].get<uint32_t>()) + " call(s) to '" +
                    w["to"].get<std::string>() + "' wait in rpc_async for room: " +
                    std::to_string(w["in_flight"].get<uint32_t>()) +
                    " in flight (max_calls_in_flight_per_peer " +
                    std::to_string(limits.max_calls_in_flight_per_peer) +
                    "), or its bytes queued at max_queued_bytes_per_connection");
  }
  DescribeCalls(d["outgoing_calls"], d["incoming_calls"], &lines);
  for (const auto& c : d["rrefs"].value("unacknowledged_controls", nlohmann::json())) {
    lines.push_back("an RRef " + c["kind"].get<std::string>() + " to '" +
                    c["to"].get<std::string>() + "' is not acknowledged yet");
  }
  d["blocked_on"] = std::move(lines);
  return d;
}

void Agent::RegisterDebugDumpFunction() {
  std::weak_ptr<Agent> weak = weak_from_this();
  incoming_->Register(
      kDebugDumpFunction,
      [weak](std::unique_ptr<IncomingCall> call, Value) {
        auto a = weak.lock();
        if (!a) return;  // the call answers itself (dropped unanswered)
        Value dump;
        dump.bytes = a->DebugDump().dump(2);
        call->Reply(std::move(dump));
      },
      /*may_block=*/false);
}

void Agent::ServeRemoteDebugDump(uint64_t conn, const InMessage& msg) {
  wire::Reader r(msg.body.data(), msg.body.size());
  const std::string name = r.Str();
  if (!r.ok()) {
    ReplyDebugDump(conn, Status(FERRY_INVALID_ARGUMENT, "malformed DEBUG_DUMP"), "");
    return;
  }
  // The secret is what keeps strangers out: without one, anyone who can
  // reach the store could read the job's state.
  if (options_.secret.empty()) {
    ReplyDebugDump(
        conn,
        Status(FERRY_PERMISSION_DENIED,
               "job '" + options_.job +
                   "' has no secret, and its workers' debug dumps are only "
                   "served to a process that proves it holds the job's secret: "
                   "start the job with FERRY_SECRET or FERRY_SECRET_FILE"),
        "");
    return;
  }
  FERRY_LOG(FERRY_LOG_INFO, kLog,
            "an authenticated debugger asked for the debug dump of '" + name + "'");
  if (name.empty() || name == options_.name) {  // "": the store's host
    ReplyDebugDump(conn, Status::Ok(), DebugDump().dump(2));
    return;
  }
  auto id = members_.Resolve(name);
  if (!id.ok() || id.value() == 0 ||
      members_.StateOf(id.value()) != MemberState::kAlive) {
    ReplyDebugDump(conn,
                   Status(FERRY_NOT_FOUND,
                          "no live worker named '" + name + "' in job '" + options_.job +
                              "'; its workers are: " + members_.Describe()),
                   "");
    return;
  }
  auto future = Call(name, kDebugDumpFunction, Value(), std::chrono::seconds(10));
  std::weak_ptr<Agent> weak = weak_from_this();
  future->Then([weak, future, conn] {
    auto a = weak.lock();
    if (!a) return;
    auto v = future->Take();
    if (v.ok()) {
      a->ReplyDebugDump(conn, Status::Ok(), v.value().bytes);
    } else {
      a->ReplyDebugDump(conn, v.status(), "");
    }
  });
}

void Agent::ReplyDebugDump(uint64_t conn, const Status& status, const std::string& text) {
  auto m = std::make_unique<OutMessage>();
  m->kind = wire::Kind::kDebugDumpReply;
  wire::Writer w = m->BodyWriter();
  w.I32(static_cast<int32_t>(status.code()));
  w.Str(status.message());
  w.Str(text);
  engine_->SendOnConn(conn, std::move(m));
}

void Agent::LogDebugDump(const std::string& why) {
  if (!log::Enabled(FERRY_LOG_WARN)) return;
  log::Write(FERRY_LOG_WARN, kLog,
             why + "\n--- ferry debug dump of worker '" + options_.name + "' (job '" +
                 options_.job + "') ---\n" + DebugDump().dump(2) +
                 "\n--- end of the debug dump ---");
}

}  // namespace ferry
