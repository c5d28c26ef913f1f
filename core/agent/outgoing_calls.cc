// The calls this worker waits for (outgoing_calls.h).
#include "agent/outgoing_calls.h"

#include "agent/executor.h"
#include "agent/incoming_calls.h"
#include "common/log.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace ferry {
namespace {

constexpr const char* kLog = "agent";
using std::chrono::milliseconds;
using std::chrono::steady_clock;

uint32_t RemainingMs(steady_clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<milliseconds>(deadline - steady_clock::now());
  return left.count() <= 0 ? 1 : static_cast<uint32_t>(left.count());
}

}  // namespace

OutgoingCalls::OutgoingCalls(WorkerParts parts) : w_(std::move(parts)) {}

Status OutgoingCalls::UnknownInStaticJob(const std::string& to) const {
  return Status(FERRY_NOT_FOUND, "no worker named '" + to + "' in job '" +
                                     w_.options.job + "' (static, world_size " +
                                     std::to_string(w_.options.world_size) +
                                     "); its workers are " + w_.members.Describe());
}

std::shared_ptr<Future> OutgoingCalls::Start(const std::string& to, wire::Request req,
                                             Value args, milliseconds timeout,
                                             OnSettled on_settled) {
  auto future = std::make_shared<Future>(&w_.engine, w_.owner.lock());
  auto fail = [&](Status s) {
    if (on_settled) on_settled(s);
    future->Complete(std::move(s));
    return future;
  };
  if (w_.stopped.load()) {
    return fail(
        Status(FERRY_FAILED_PRECONDITION,
               "worker '" + w_.options.name + "' has shut down: start a new one"));
  }
  // A call made while serving one, with no timeout of its own, inherits
  // what is left of the served call's deadline.
  const CallState* served = IncomingCalls::Current();
  if (timeout.count() == 0 && served != nullptr && served->has_deadline()) {
    const auto left =
        std::chrono::duration_cast<milliseconds>(served->deadline - steady_clock::now());
    if (left.count() <= 0) {
      return fail(Status(FERRY_DEADLINE_EXCEEDED,
                         "no time left: this call was made by a handler whose own "
                         "caller's deadline has passed"));
    }
    timeout = left;
  }
  if (timeout.count() == 0) timeout = w_.options.default_timeout;
  const auto deadline = steady_clock::now() + timeout;
  auto target = w_.members.Resolve(to);
  if (!target.ok()) return fail(target.status());
  if (target.value() == 0 && w_.options.world_size > 0) {
    // A static job's members all joined before its start returned: a name
    // none of them has is a mistake, not a worker still to come (torch).
    return fail(UnknownInStaticJob(to));
  }
  if (target.value() != 0 && w_.options.world_size > 0) {
    // A static job's member that left (possibly before this worker joined,
    // so the engine never knew it) keeps its name: PEER_GONE, at once.
    const MemberState state = w_.members.StateOf(target.value());
    if (state != MemberState::kAlive) {
      return fail(Status(FERRY_PEER_GONE,
                         "worker '" + w_.members.NameOf(target.value()) + "' " +
                             (state == MemberState::kLeft ? "left" : "is gone from") +
                             " job '" + w_.options.job + "'"));
    }
  }
  const uint64_t self = w_.engine.self_id();
  if (target.value() == self && self != 0 && local_dispatch_ &&
      req.call_kind == wire::CallKind::kRpc) {
    return StartLocal(std::move(future), to, std::move(req), std::move(args), deadline);
  }
  if (target.value() == self && self != 0) {
    return fail(
        Status(FERRY_INVALID_ARGUMENT, "a call from worker '" + w_.options.name +
                                           "' to itself: call the function directly"));
  }
  if (target.value() != 0) {
    // Back-pressure: the place this takes is the call's from here on.
    Status room = WaitForRoom(target.value(), to, deadline);
    if (!room.ok()) return fail(std::move(room));
  }
  PendingCall pc;
  pc.future = future;
  pc.to = target.value();
  pc.to_name = to;
  pc.deadline = deadline;
  pc.on_settled = std::move(on_settled);
  pc.counted = target.value() != 0;
  Describe(pc, req.function);
  uint64_t call_id;
  {
    std::lock_guard<std::mutex> l(mu_);
    call_id = next_call_id_++;
  }
  req.call_id = call_id;
  req.timeout_ms = RemainingMs(deadline);
  Status s = BuildMessage(pc, std::move(req), std::move(args));
  if (!s.ok()) {
    {
      std::lock_guard<std::mutex> l(mu_);
      UncountLocked(pc);
    }
    for (const auto& f : pc.forks) w_.rrefs.ForkAborted(f);
    // on_settled is not called on this path, so a remote() whose arguments
    // cannot be encoded keeps its fork unconfirmed: a known gap, left for a
    // change of behaviour of its own.
    future->Complete(std::move(s));
    return future;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    earliest_deadline_ = std::min(earliest_deadline_, pc.deadline);
    calls_.emplace(call_id, std::move(pc));
  }
  future->SetCanceller([owner = w_.owner, this, call_id] {
    if (auto keep = owner.lock()) Cancel(call_id);
  });
  SendPending(call_id);
  return future;
}

void OutgoingCalls::Describe(PendingCall& pc, const std::string& function) {
  pc.function = function;
  pc.started = steady_clock::now();
  if (const CallState* served = IncomingCalls::Current()) {
    pc.parent_caller = served->caller_name.empty()
                           ? "#" + std::to_string(served->caller_id)
                           : served->caller_name;
    pc.parent_function = served->function;
    pc.parent_call_id = served->call_id;
  }
}

nlohmann::json OutgoingCalls::DebugDump() {
  const auto now = steady_clock::now();
  auto ms = [](steady_clock::duration d) {
    return std::chrono::duration_cast<milliseconds>(d).count();
  };
  nlohmann::json calls = nlohmann::json::array();
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [call_id, pc] : calls_) {
    nlohmann::json c = {
        {"call_id", call_id},
        {"to", pc.to_name},
        {"to_id", pc.to},
        {"function", pc.function},
        {"age_ms", ms(now - pc.started)},
        {"deadline_in_ms", ms(pc.deadline - now)},
        {"state", pc.local     ? "running here (a call to this worker itself)"
                  : pc.to == 0 ? "waiting for a worker of that name to join"
                  : pc.unsent  ? "not sent yet"
                               : "sent, waiting for the reply"},
    };
    if (!pc.parent_function.empty()) {
      c["made_by"] = {{"caller", pc.parent_caller},
                      {"function", pc.parent_function},
                      {"call_id", pc.parent_call_id}};
    }
    calls.push_back(std::move(c));
  }
  return calls;
}

nlohmann::json OutgoingCalls::WaitingForRoom() {
  nlohmann::json out = nlohmann::json::array();
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [to, n] : waiting_for_room_) {
    auto it = in_flight_.find(to);
    out.push_back({{"to", w_.members.NameOf(to)},
                   {"to_id", to},
                   {"waiting", n},
                   {"in_flight", it == in_flight_.end() ? 0 : it->second}});
  }
  return out;
}

void OutgoingCalls::SetLocal(LocalDispatch dispatch,
                             std::function<void(uint64_t call_id)> cancel) {
  local_dispatch_ = std::move(dispatch);
  local_cancel_ = std::move(cancel);
}

std::shared_ptr<Future> OutgoingCalls::StartLocal(std::shared_ptr<Future> future,
                                                  const std::string& to,
                                                  wire::Request req, Value args,
                                                  steady_clock::time_point deadline) {
  PendingCall pc;
  pc.future = future;
  pc.to = w_.engine.self_id();
  pc.to_name = to;
  pc.deadline = deadline;
  pc.local = true;
  Describe(pc, req.function);
  uint64_t call_id;
  {
    std::lock_guard<std::mutex> l(mu_);
    call_id = next_call_id_++;
    earliest_deadline_ = std::min(earliest_deadline_, deadline);
    calls_.emplace(call_id, std::move(pc));
  }
  future->SetCanceller([owner = w_.owner, this, call_id] {
    if (auto keep = owner.lock()) Cancel(call_id);
  });
  req.call_id = call_id;
  req.timeout_ms = RemainingMs(deadline);
  local_dispatch_(call_id, req, std::move(args), deadline);
  return future;
}

void OutgoingCalls::OnLocalResponse(uint64_t call_id, Status status, Value value) {
  PendingCall pc;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = calls_.find(call_id);
    if (it == calls_.end() || !it->second.local) return;  // ended already
    pc = std::move(it->second);
    calls_.erase(it);
  }
  if (pc.on_settled) pc.on_settled(status);
  pc.future->Complete(std::move(status), std::move(value));
}

Status OutgoingCalls::BuildMessage(PendingCall& pc, wire::Request req, Value args) {
  auto msg = std::make_unique<OutMessage>();
  msg->kind = wire::Kind::kRequest;
  if (pc.to != 0) {
    Status s = w_.codec.Encode(args, pc.to, &req.value, msg.get(), &pc.forks);
    if (!s.ok()) return s;
    wire::Writer w = msg->BodyWriter();
    wire::Put(w, req);
  } else {
    // Encoded once the worker is known (RRef forks need the destination).
    auto held = std::make_shared<Value>(std::move(args));
    auto req_copy = std::make_shared<wire::Request>(std::move(req));
    msg->keepalive = std::shared_ptr<void>(held, held.get());
    msg->deferred = [codec = &w_.codec, held, req_copy](
                        uint64_t dest, OutMessage* m, std::vector<wire::RRefRef>* forks) {
      Status s = codec->Encode(*held, dest, &req_copy->value, m, forks);
      if (!s.ok()) return s;
      wire::Writer w = m->BodyWriter();
      wire::Put(w, *req_copy);
      return Status::Ok();
    };
  }
  pc.unsent = std::move(msg);
  return Status::Ok();
}

void OutgoingCalls::SendPending(uint64_t call_id) {
  std::unique_ptr<OutMessage> msg;
  uint64_t to;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = calls_.find(call_id);
    if (it == calls_.end() || it->second.to == 0 || !it->second.unsent) return;
    msg = std::move(it->second.unsent);
    to = it->second.to;
  }
  Status s;
  if (msg->deferred) {
    std::vector<wire::RRefRef> made;
    s = msg->deferred(to, msg.get(), &made);
    msg->deferred = nullptr;
    std::lock_guard<std::mutex> l(mu_);
    auto it = calls_.find(call_id);
    if (it != calls_.end())
      it->second.forks = made;
    else
      for (const auto& f : made) w_.rrefs.ForkAborted(f);
  }
  if (s.ok()) s = w_.engine.SendToMember(to, std::move(msg));
  if (s.ok()) return;
  PendingCall pc;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = calls_.find(call_id);
    if (it == calls_.end()) return;
    pc = std::move(it->second);
    calls_.erase(it);
    UncountLocked(pc);
  }
  for (const auto& f : pc.forks) w_.rrefs.ForkAborted(f);
  if (pc.on_settled) pc.on_settled(s);
  pc.future->Complete(s);
}

void OutgoingCalls::OnMemberJoined(const std::string& name, uint64_t id) {
  std::vector<uint64_t> ready;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [call_id, c] : calls_) {
      if (c.to == 0 && c.to_name == name) {
        c.to = id;
        // Counted without waiting: it waited for the join already, and
        // the calls waiting for a name are few.
        CountLocked(c);
        ready.push_back(call_id);
      }
    }
  }
  for (uint64_t call_id : ready) SendPending(call_id);
}

void OutgoingCalls::OnResponse(PeerKey from, InMessage& msg) {
  wire::Reader r(msg.body.data(), msg.body.size());
  wire::Response resp;
  if (!wire::Get(r, &resp)) {
    FERRY_LOG(
        FERRY_LOG_WARN, kLog,
        "malformed response from worker id " + std::to_string(from.id) + " dropped");
    return;
  }
  PendingCall pc;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = calls_.find(resp.call_id);
    if (it == calls_.end() || it->second.to != from.id) return;  // late or stray
    pc = std::move(it->second);
    calls_.erase(it);
    UncountLocked(pc);
  }
  auto value = w_.codec.Decode(from.id, resp.value, msg);
  Status status = resp.status == FERRY_OK ? (value.ok() ? Status::Ok() : value.status())
                                          : Status(resp.status, resp.message);
  if (pc.on_settled) pc.on_settled(resp.status == FERRY_OK ? Status::Ok() : status);
  if (status.ok())
    pc.future->Complete(Status::Ok(), std::move(value.value()));
  else
    pc.future->Complete(status);
}

void OutgoingCalls::ExpireDue() {
  const auto now = steady_clock::now();
  std::vector<std::pair<uint64_t, PendingCall>> expired;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (now < earliest_deadline_) return;
    earliest_deadline_ = steady_clock::time_point::max();
    for (auto it = calls_.begin(); it != calls_.end();) {
      if (now >= it->second.deadline) {
        UncountLocked(it->second);
        expired.emplace_back(it->first, std::move(it->second));
        it = calls_.erase(it);
      } else {
        earliest_deadline_ = std::min(earliest_deadline_, it->second.deadline);
        ++it;
      }
    }
  }
  for (auto& [call_id, pc] : expired) {
    Status s = pc.to == 0 ? Status(FERRY_NOT_FOUND,
                                   "no worker named '" + pc.to_name + "' joined job '" +
                                       w_.options.job + "' before the call's deadline")
                          : Status(FERRY_DEADLINE_EXCEEDED,
                                   "no reply from worker '" + pc.to_name +
                                       "' before the deadline "
                                       "(raise the timeout if the function is slow)");
    if (pc.to == 0) {
      // Never sent: its RRef forks are undone with the unsent message.
      for (const auto& f : pc.forks) w_.rrefs.ForkAborted(f);
    } else if (pc.local) {
      local_cancel_(call_id);
    } else if (!pc.unsent) {
      SendCancel(pc.to, call_id, wire::CancelReason::kDeadline);
    }
    if (pc.on_settled) pc.on_settled(s);
    pc.future->Complete(s);
  }
}

void OutgoingCalls::Cancel(uint64_t call_id) {
  PendingCall pc;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = calls_.find(call_id);
    if (it == calls_.end()) return;
    pc = std::move(it->second);
    calls_.erase(it);
    UncountLocked(pc);
  }
  const Status s(FERRY_CANCELLED, "the call was cancelled by its caller");
  if (pc.local) {
    local_cancel_(call_id);
  } else if (pc.to != 0 && !pc.unsent) {
    SendCancel(pc.to, call_id, wire::CancelReason::kCancelled);
  } else {
    for (const auto& f : pc.forks) w_.rrefs.ForkAborted(f);
  }
  if (pc.on_settled) pc.on_settled(s);
  pc.future->Complete(s);
}

void OutgoingCalls::CountLocked(PendingCall& pc) {
  if (pc.counted || pc.to == 0 || pc.local) return;
  ++in_flight_[pc.to];
  pc.counted = true;
}

void OutgoingCalls::UncountLocked(PendingCall& pc) {
  if (!pc.counted) return;
  pc.counted = false;
  auto it = in_flight_.find(pc.to);
  if (it == in_flight_.end()) return;
  if (--it->second == 0) in_flight_.erase(it);
}

Status OutgoingCalls::WaitForRoom(uint64_t to, const std::string& name,
                                  steady_clock::time_point deadline) {
  const Limits& limits = w_.options.limits;
  bool placed = false;
  bool calls_full = false;
  uint32_t calls = 0;
  uint64_t bytes = 0;
  // Idempotent: WaitUntil may ask again after it said yes.
  auto try_place = [&] {
    if (placed) return true;
    bytes = w_.engine.QueuedBytesTo(to);
    std::lock_guard<std::mutex> l(mu_);
    auto it = in_flight_.find(to);
    calls = it == in_flight_.end() ? 0 : it->second;
    calls_full = calls >= limits.max_calls_in_flight_per_peer;
    if (calls_full || bytes >= limits.max_queued_bytes_per_connection) return false;
    ++in_flight_[to];
    placed = true;
    return true;
  };
  if (try_place()) return Status::Ok();
  const auto began = steady_clock::now();
  {
    std::lock_guard<std::mutex> l(mu_);
    ++waiting_for_room_[to];
  }
  {
    // On an executor thread this wait may hold the work queued behind it:
    // the pool grows meanwhile (executor.h).
    Executor::Blocking blocking;
    w_.engine.WaitUntil(try_place, deadline);
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = waiting_for_room_.find(to);
    if (it != waiting_for_room_.end() && --it->second == 0) waiting_for_room_.erase(it);
  }
  if (placed) return Status::Ok();
  const auto waited =
      std::chrono::duration_cast<milliseconds>(steady_clock::now() - began);
  const std::string who = w_.members.NameOf(to).empty() ? name : w_.members.NameOf(to);
  return Status(
      FERRY_DEADLINE_EXCEEDED,
      "the call waited " + std::to_string(waited.count()) +
          " ms for room and its deadline passed before it was sent: " +
          (calls_full ? std::to_string(calls) + " calls to worker '" + who +
                            "' were in flight, " +
                            Limits::Describe("max_calls_in_flight_per_peer",
                                             limits.max_calls_in_flight_per_peer)
                      : std::to_string(bytes) + " bytes to worker '" + who +
                            "' were queued and not yet sent, " +
                            Limits::Describe("max_queued_bytes_per_connection",
                                             limits.max_queued_bytes_per_connection)));
}

void OutgoingCalls::SendCancel(uint64_t to, uint64_t call_id, wire::CancelReason why) {
  auto msg = std::make_unique<OutMessage>();
  msg->kind = wire::Kind::kCancel;
  wire::Writer w = msg->BodyWriter();
  wire::Put(w, wire::Cancel{call_id, why});
  Status s = w_.engine.SendToMember(to, std::move(msg));
  if (!s.ok()) FERRY_LOG(FERRY_LOG_DEBUG, kLog, "cancel not sent: " + s.ToString());
}

void OutgoingCalls::FailCallsTo(uint64_t id, const Status& why) {
  std::vector<PendingCall> failed;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = calls_.begin(); it != calls_.end();) {
      if (it->second.to == id) {
        UncountLocked(it->second);
        failed.push_back(std::move(it->second));
        it = calls_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& pc : failed) {
    if (pc.on_settled) pc.on_settled(why);
    pc.future->Complete(why);
  }
}

void OutgoingCalls::CancelAll(const Status& why) {
  std::map<uint64_t, PendingCall> calls;
  {
    std::lock_guard<std::mutex> l(mu_);
    calls.swap(calls_);
    in_flight_.clear();
  }
  for (auto& [id, c] : calls) c.future->Complete(why);
}

size_t OutgoingCalls::size() {
  std::lock_guard<std::mutex> l(mu_);
  return calls_.size();
}

}  // namespace ferry
