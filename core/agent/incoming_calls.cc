// Serving the calls that arrive here (incoming_calls.h).
#include "agent/incoming_calls.h"

#include "common/log.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace ferry {
namespace {
constexpr const char* kLog = "agent";

thread_local const CallState* t_current = nullptr;

// Makes `state` the current call of this thread while a handler runs.
class CurrentCall {
 public:
  explicit CurrentCall(const CallState* state) : prev_(t_current) { t_current = state; }
  ~CurrentCall() { t_current = prev_; }
  CurrentCall(const CurrentCall&) = delete;
  CurrentCall& operator=(const CurrentCall&) = delete;

 private:
  const CallState* prev_;
};

int64_t NowNs() {
  const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::steady_clock::now().time_since_epoch())
                         .count();
  return ns == 0 ? 1 : ns;  // 0 means "not started"
}

int64_t MsSince(std::chrono::steady_clock::time_point t,
                std::chrono::steady_clock::time_point now) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - t).count();
}

// Why a call whose caller gave up is dropped unrun.
Status GivenUp(const CallState& st, const std::string& function) {
  if (st.cancelled.load())
    return Status(FERRY_CANCELLED, "function '" + function +
                                       "' was not run: its caller cancelled the call "
                                       "or is gone");
  return Status(FERRY_DEADLINE_EXCEEDED,
                "function '" + function +
                    "' was not run: the caller's deadline passed while it was queued");
}
}  // namespace

const CallState* IncomingCalls::Current() {
  return t_current;
}

IncomingCalls::IncomingCalls(WorkerParts parts)
    : w_(std::move(parts)),
      executor_(std::make_unique<Executor>(
          std::max(1u, w_.options.executor_threads),
          // Room for handlers blocked in nested waits (executor.h).
          std::max(16 * std::max(1u, w_.options.executor_threads), 64u))) {}

// ---- registration -------------------------------------------------------------

Status IncomingCalls::Register(const std::string& function, Handler handler,
                               bool may_block) {
  if (function.empty()) {
    return Status(FERRY_INVALID_ARGUMENT, "a function needs a non-empty name");
  }
  std::lock_guard<std::mutex> l(mu_);
  if (handlers_.count(function)) {
    return Status(FERRY_ALREADY_EXISTS,
                  "function '" + function + "' is already registered on this worker");
  }
  handlers_[function] =
      HandlerEntry{std::make_shared<const Handler>(std::move(handler)), may_block};
  for (const EarlyCall& c : early_calls_) {
    if (c.function != function) continue;
    // On the thread that pumps, as every call is dispatched.
    w_.engine.AddTimer(std::chrono::milliseconds(0), [owner = w_.owner, this, function] {
      if (auto keep = owner.lock()) RedispatchEarlyCalls(function);
    });
    break;
  }
  return Status::Ok();
}

void IncomingCalls::HoldEarlyCallsUntil(std::chrono::steady_clock::time_point until) {
  std::lock_guard<std::mutex> l(mu_);
  registration_grace_until_ = until;
}

void IncomingCalls::EndGraceIfOver() {
  bool grace_over;
  {
    std::lock_guard<std::mutex> l(mu_);
    grace_over = !early_calls_.empty() &&
                 std::chrono::steady_clock::now() >= registration_grace_until_;
  }
  if (grace_over) RedispatchEarlyCalls("");
}

void IncomingCalls::RedispatchEarlyCalls(const std::string& function) {
  std::vector<EarlyCall> ready;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = early_calls_.begin(); it != early_calls_.end();) {
      if (function.empty() || it->function == function) {
        ready.push_back(std::move(*it));
        it = early_calls_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (EarlyCall& c : ready) {
    queued_.fetch_sub(1);  // OnRequest queues it again if it must wait
    OnRequest(c.from, *c.msg);
  }
}

// ---- serving ------------------------------------------------------------------

void IncomingCalls::OnRequest(PeerKey from, InMessage& msg) {
  wire::Reader r(msg.body.data(), msg.body.size());
  wire::Request req;
  if (!wire::Get(r, &req)) {
    FERRY_LOG(FERRY_LOG_WARN, kLog,
              "malformed request from worker id " + std::to_string(from.id) + " dropped");
    return;
  }
  if (w_.stopped.load()) {
    // The same status, and the same words, as a call that finds it gone
    // (Peer::LeftTheJob): a call reaching a leaving worker gets one answer,
    // whatever the timing (docs/membership.md, worker states).
    Respond(from, req.call_id,
            Status(FERRY_PEER_GONE, "worker '" + w_.options.name +
                                        "' left the job (the call reached it while it "
                                        "was leaving; it did not run)"),
            nullptr);
    return;
  }
  if (req.call_kind == wire::CallKind::kFetch) {
    ServeFetch(from, req);
    return;
  }
  HandlerEntry entry;
  std::string known;
  const Lookup found = FindHandler(from, req, msg, &entry, &known);
  if (found == Lookup::kHeld) return;
  if (req.call_kind == wire::CallKind::kRemote) {
    // Record the caller's fork and confirm it at once (the answer to a
    // remote() call is the owner's acknowledgement of {RRefId, ForkId}).
    w_.rrefs.OwnerAddFork(req.rref, req.fork, from.id);
  }
  auto value = w_.codec.Decode(from.id, req.value, msg);
  Status problem;
  if (found == Lookup::kQueueFull) {
    problem = QueueFull(req.function);
  } else if (found == Lookup::kUnknown) {
    problem = Status(FERRY_NOT_FOUND,
                     "no function '" + req.function + "' is registered on worker '" +
                         w_.options.name +
                         "' (registered: " + (known.empty() ? "none" : known) + ")");
  } else if (!value.ok()) {
    problem = value.status();
  }
  auto call = std::unique_ptr<IncomingCall>(new IncomingCall());
  call->keepalive_ = w_.owner.lock();
  call->calls_ = this;
  call->from_ = from;
  call->function_ = req.function;
  call->call_id_ = req.call_id;
  call->kind_ = req.call_kind;
  call->rref_ = req.rref;
  call->caller_name_ = w_.members.NameOf(from.id);
  call->state_ = NewCallState(*call, std::chrono::steady_clock::now());
  if (req.timeout_ms != 0) {
    call->state_->deadline =
        call->state_->arrived + std::chrono::milliseconds(req.timeout_ms);
  }
  AddLive(call->state_);
  if (req.call_kind == wire::CallKind::kRemote) {
    Respond(from, req.call_id, Status::Ok(), nullptr);
  }
  serving_.fetch_add(1);
  if (!problem.ok()) {
    call->Fail(problem);
    return;
  }
  Run(std::move(entry), std::move(call), std::move(value.value()));
}

IncomingCalls::Lookup IncomingCalls::FindHandler(PeerKey from, const wire::Request& req,
                                                 InMessage& msg, HandlerEntry* entry,
                                                 std::string* known) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = handlers_.find(req.function);
  if (it != handlers_.end()) {
    *entry = it->second;
    return Lookup::kFound;
  }
  if (std::chrono::steady_clock::now() < registration_grace_until_) {
    if (!TakeQueueSlot()) return Lookup::kQueueFull;
    early_calls_.push_back(
        EarlyCall{from, std::make_shared<InMessage>(std::move(msg)), req.function});
    return Lookup::kHeld;
  }
  for (const auto& [name, h] : handlers_) *known += (known->empty() ? "" : ", ") + name;
  return Lookup::kUnknown;
}

void IncomingCalls::ServeFetch(PeerKey from, const wire::Request& req) {
  const uint64_t call_id = req.call_id;
  w_.rrefs.WhenReady(req.rref, [owner = w_.owner, this, from, call_id](
                                   const Status& s, std::shared_ptr<Value> v) {
    auto keep = owner.lock();
    if (!keep) return;
    if (!s.ok())
      Respond(from, call_id, s, nullptr);
    else
      Respond(from, call_id, Status::Ok(), nullptr, v);
  });
}

void IncomingCalls::Run(HandlerEntry entry, std::unique_ptr<IncomingCall> call,
                        Value args, bool on_executor) {
  if (!entry.may_block && !on_executor) {
    std::shared_ptr<CallState> st = call->state_;
    CurrentCall current(st.get());
    st->started_ns.store(NowNs());
    (*entry.fn)(std::move(call), std::move(args));
    st->handler_returned.store(true);
    return;
  }
  if (!TakeQueueSlot()) {
    call->Fail(QueueFull(call->function()));
    return;
  }
  executor_->Post([this, fn = std::move(entry.fn), c = call.release(),
                   v = std::make_shared<Value>(std::move(args))]() mutable {
    queued_.fetch_sub(1);
    std::unique_ptr<IncomingCall> queued(c);
    std::shared_ptr<CallState> st = queued->state_;
    if (st->given_up()) {
      // Work for a caller that is gone or gave up is not done.
      dropped_.fetch_add(1);
      FERRY_LOG(FERRY_LOG_DEBUG, kLog,
                "dropped a queued call of '" + queued->function() + "' from '" +
                    queued->caller_name() + "': its caller gave up");
      queued->Fail(GivenUp(*st, queued->function()));
      return;
    }
    CurrentCall current(st.get());
    st->started_ns.store(NowNs());
    (*fn)(std::move(queued), std::move(*v));
    st->handler_returned.store(true);
  });
}

bool IncomingCalls::TakeQueueSlot() {
  if (queued_.fetch_add(1) < w_.options.limits.max_queued_calls) return true;
  queued_.fetch_sub(1);
  return false;
}

Status IncomingCalls::QueueFull(const std::string& function) {
  const uint64_t n = refused_.fetch_add(1) + 1;
  const std::string why =
      "worker '" + w_.options.name + "' refused the call of '" + function +
      "': " + std::to_string(w_.options.limits.max_queued_calls) +
      " calls already wait there for a handler thread, " +
      Limits::Describe("max_queued_calls", w_.options.limits.max_queued_calls) +
      ". It did not run: call again later, or keep fewer calls in flight";
  // The first refusal, then every 1000th: a flood must not flood the log.
  if (n == 1 || n % 1000 == 0) {
    FERRY_LOG(FERRY_LOG_WARN, kLog,
              why + " (" + std::to_string(n) + " refused so far on this worker)");
  }
  return Status(FERRY_RESOURCE_EXHAUSTED, why);
}

void IncomingCalls::RunLocal(uint64_t call_id, const wire::Request& req, Value args,
                             std::chrono::steady_clock::time_point deadline,
                             std::function<void(Status, Value)> reply) {
  if (w_.stopped.load()) {
    reply(Status(FERRY_UNAVAILABLE, "worker '" + w_.options.name + "' is shutting down"),
          Value());
    return;
  }
  HandlerEntry entry;
  std::string known;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = handlers_.find(req.function);
    if (it != handlers_.end()) {
      entry = it->second;
    } else {
      for (const auto& [name, h] : handlers_) known += (known.empty() ? "" : ", ") + name;
    }
  }
  if (!entry.fn) {
    reply(Status(FERRY_NOT_FOUND,
                 "no function '" + req.function + "' is registered on worker '" +
                     w_.options.name +
                     "' (registered: " + (known.empty() ? "none" : known) + ")"),
          Value());
    return;
  }
  const PeerKey self{w_.engine.self_id(), 0};
  auto call = std::unique_ptr<IncomingCall>(new IncomingCall());
  call->keepalive_ = w_.owner.lock();
  call->calls_ = this;
  call->from_ = self;
  call->function_ = req.function;
  call->call_id_ = call_id;
  call->kind_ = wire::CallKind::kRpc;
  call->caller_name_ = w_.options.name;
  call->local_reply_ = std::move(reply);
  call->state_ = NewCallState(*call, std::chrono::steady_clock::now());
  call->state_->deadline = deadline;
  AddLive(call->state_);
  serving_.fetch_add(1);
  Run(std::move(entry), std::move(call), std::move(args), /*on_executor=*/true);
}

std::shared_ptr<CallState> IncomingCalls::NewCallState(
    const IncomingCall& call, std::chrono::steady_clock::time_point now) {
  auto st = std::make_shared<CallState>();
  st->caller_id = call.from_.id;
  st->call_id = call.call_id_;
  st->caller_name = call.caller_name_;
  st->function = call.function_;
  st->arrived = now;
  return st;
}

void IncomingCalls::AddLive(const std::shared_ptr<CallState>& state) {
  std::lock_guard<std::mutex> l(live_mu_);
  live_[LiveKey{state->caller_id, state->call_id}] = state;
}

nlohmann::json IncomingCalls::DebugDump() {
  const auto now = std::chrono::steady_clock::now();
  const int64_t now_ns = NowNs();
  nlohmann::json out;
  nlohmann::json calls = nlohmann::json::array();
  {
    std::lock_guard<std::mutex> l(live_mu_);
    for (const auto& [key, st] : live_) {
      const int64_t started = st->started_ns.load();
      nlohmann::json c = {
          {"caller", st->caller_name.empty() ? "#" + std::to_string(st->caller_id)
                                             : st->caller_name},
          {"caller_id", st->caller_id},
          {"call_id", st->call_id},
          {"function", st->function},
          {"age_ms", MsSince(st->arrived, now)},
          {"state", started == 0                  ? "queued"
                    : st->handler_returned.load() ? "answer pending"
                                                  : "running"},
          {"cancelled", st->cancelled.load()},
      };
      if (started != 0) c["running_ms"] = (now_ns - started) / 1000000;
      c["deadline_in_ms"] = st->has_deadline()
                                ? nlohmann::json(-MsSince(st->deadline, now))
                                : nlohmann::json(nullptr);
      calls.push_back(std::move(c));
    }
  }
  out["calls"] = std::move(calls);
  nlohmann::json early = nlohmann::json::array();
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const EarlyCall& c : early_calls_) {
      early.push_back({{"caller_id", c.from.id}, {"function", c.function}});
    }
  }
  out["held_for_registration"] = std::move(early);
  std::lock_guard<std::mutex> l(mu_);  // executor_ is not destroyed meanwhile
  if (executor_) {
    const Executor::Load load = executor_->load();
    out["executor"] = {{"queued", load.queued},
                       {"threads", load.threads},
                       {"idle", load.idle},
                       {"blocked_in_nested_waits", load.blocked}};
  }
  return out;
}

void IncomingCalls::StopExecutor() {
  std::unique_ptr<Executor> executor;
  {
    std::lock_guard<std::mutex> l(mu_);
    executor = std::move(executor_);
  }
  executor.reset();  // runs what is queued, then joins: without the lock
}

void IncomingCalls::CancelLocal(uint64_t call_id) {
  std::lock_guard<std::mutex> l(live_mu_);
  auto it = live_.find(LiveKey{w_.engine.self_id(), call_id});
  if (it != live_.end()) it->second->cancelled.store(true);
}

void IncomingCalls::OnCancel(PeerKey from, InMessage& msg) {
  wire::Reader r(msg.body.data(), msg.body.size());
  wire::Cancel c;
  if (!wire::Get(r, &c)) {
    FERRY_LOG(FERRY_LOG_WARN, kLog,
              "malformed cancel from worker id " + std::to_string(from.id) + " dropped");
    return;
  }
  std::lock_guard<std::mutex> l(live_mu_);
  auto it = live_.find(LiveKey{from.id, c.call_id});
  if (it != live_.end()) it->second->cancelled.store(true);
}

void IncomingCalls::OnCallerGone(uint64_t id) {
  std::lock_guard<std::mutex> l(live_mu_);
  for (auto it = live_.lower_bound(LiveKey{id, 0});
       it != live_.end() && it->first.caller == id; ++it) {
    it->second->cancelled.store(true);
  }
}

void IncomingCalls::Forget(uint64_t caller, uint64_t call_id) {
  std::lock_guard<std::mutex> l(live_mu_);
  live_.erase(LiveKey{caller, call_id});
}

void IncomingCalls::Respond(const PeerKey& to, uint64_t call_id, Status status,
                            Value* value, const std::shared_ptr<Value>& shared) {
  wire::Response resp;
  resp.call_id = call_id;
  resp.status = status.code();
  resp.message = status.message();
  auto msg = std::make_unique<OutMessage>();
  msg->kind = wire::Kind::kResponse;
  std::vector<wire::RRefRef> forks;
  Status s;
  if (status.ok() && value != nullptr) {
    s = w_.codec.Encode(*value, to.id, &resp.value, msg.get(), &forks);
  } else if (status.ok() && shared) {
    s = w_.codec.EncodeShared(shared, to.id, &resp.value, msg.get(), &forks);
  }
  if (!s.ok()) {
    for (const auto& f : forks) w_.rrefs.ForkAborted(f);
    forks.clear();
    msg = std::make_unique<OutMessage>();
    msg->kind = wire::Kind::kResponse;
    resp.status = s.code();
    resp.message = "the result could not be sent: " + s.message();
    resp.value = wire::ValueMeta();
  }
  wire::Writer w = msg->BodyWriter();
  wire::Put(w, resp);
  s = w_.engine.SendToMember(to.id, std::move(msg));
  if (!s.ok()) {
    for (const auto& f : forks) w_.rrefs.ForkAborted(f);
    FERRY_LOG(FERRY_LOG_DEBUG, kLog, "reply not sent: " + s.ToString());
    if (s.code() == FERRY_RESOURCE_EXHAUSTED && resp.status == FERRY_OK) {
      // A result over a limit (max_message_size): the caller hears why
      // now rather than at its deadline.
      Respond(to, call_id,
              Status(s.code(), "worker '" + w_.options.name +
                                   "' ran the call, but its result could not be "
                                   "sent: " +
                                   s.message()),
              nullptr);
    }
  }
}

// ---- IncomingCall ----------------------------------------------------------------

Status IncomingCall::Reply(Value result) {
  if (answered_.exchange(true)) {
    return Status(FERRY_FAILED_PRECONDITION, "this call was answered already");
  }
  if (local_reply_) {
    local_reply_(Status::Ok(), std::move(result));
  } else if (kind_ == wire::CallKind::kRemote) {
    calls_->w_.rrefs.OwnerSetValue(rref_, Status::Ok(),
                                   std::make_shared<Value>(std::move(result)));
  } else {
    calls_->Respond(from_, call_id_, Status::Ok(), &result);
  }
  if (state_) calls_->Forget(from_.id, call_id_);
  calls_->serving_.fetch_sub(1);
  return Status::Ok();
}

Status IncomingCall::Fail(Status error) {
  if (answered_.exchange(true)) {
    return Status(FERRY_FAILED_PRECONDITION, "this call was answered already");
  }
  if (error.ok()) error = Status(FERRY_UNKNOWN, "the handler failed without a status");
  if (local_reply_) {
    local_reply_(error, Value());
  } else if (kind_ == wire::CallKind::kRemote) {
    calls_->w_.rrefs.OwnerSetValue(rref_, error, nullptr);
  } else {
    calls_->Respond(from_, call_id_, error, nullptr);
  }
  if (state_) calls_->Forget(from_.id, call_id_);
  calls_->serving_.fetch_sub(1);
  return Status::Ok();
}

IncomingCall::~IncomingCall() {
  // A handler that dropped its call without answering: answer for it, so
  // the caller gets an error now rather than at its deadline.
  if (!answered_.load() && calls_ != nullptr) {
    Fail(Status(FERRY_INTERNAL,
                "function '" + function_ + "' returned without answering its call"));
  }
}

}  // namespace ferry
