// ferry::Agent: outgoing calls, serving incoming calls, and values on the
// wire (agent.h).
#include "agent/agent.h"

#include "common/log.h"

#include <cstring>

namespace ferry {
namespace {

constexpr const char* kLog = "agent";
using std::chrono::milliseconds;
using std::chrono::steady_clock;

uint32_t RemainingMs(steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - steady_clock::now());
  return left.count() <= 0 ? 1 : static_cast<uint32_t>(left.count());
}

}  // namespace

// ---- registration ---------------------------------------------------------

Status Agent::Register(const std::string& function, Handler handler, bool may_block) {
  if (function.empty()) {
    return Status(FERRY_INVALID_ARGUMENT, "a function needs a non-empty name");
  }
  std::lock_guard<std::mutex> l(mu_);
  if (handlers_.count(function)) {
    return Status(FERRY_ALREADY_EXISTS, "function '" + function +
                                            "' is already registered on this worker");
  }
  handlers_[function] =
      HandlerEntry{std::make_shared<const Handler>(std::move(handler)), may_block};
  for (const EarlyCall& c : early_calls_) {
    if (c.function != function) continue;
    // On the thread that pumps, as every call is dispatched.
    std::weak_ptr<Agent> weak = weak_from_this();
    engine_->AddTimer(std::chrono::milliseconds(0), [weak, function] {
      if (auto a = weak.lock()) a->RedispatchEarlyCalls(function);
    });
    break;
  }
  return Status::Ok();
}

void Agent::RedispatchEarlyCalls(const std::string& function) {
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
  for (EarlyCall& c : ready) OnRequest(c.from, *c.msg);
}

// ---- values -----------------------------------------------------------------

Status Agent::EncodeValue(Value& v, uint64_t to, wire::ValueMeta* meta, OutMessage* msg,
                          std::vector<wire::RRefRef>* forks) {
  return EncodeParts(v, /*hand_over_tensors=*/true, to, meta, msg, forks);
}

Status Agent::EncodeParts(Value& v, bool hand_over_tensors, uint64_t to,
                          wire::ValueMeta* meta, OutMessage* msg,
                          std::vector<wire::RRefRef>* forks) {
  meta->bytes = v.bytes;
  for (size_t i = 0; i < v.tensors.size(); ++i) {
    DLManagedTensor* t = v.tensors[i];
    if (t == nullptr) {
      return Status(FERRY_INVALID_ARGUMENT, "tensor " + std::to_string(i) + " is NULL");
    }
    auto nbytes = TensorBytes(t->dl_tensor, i);
    if (!nbytes.ok()) return nbytes.status();
    if (t->dl_tensor.device.device_type != kDLCPU &&
        t->dl_tensor.device.device_type != kDLCUDAHost) {
      return Status(FERRY_INVALID_ARGUMENT,
                    "tensor " + std::to_string(i) + " lives on device type " +
                        std::to_string(t->dl_tensor.device.device_type) +
                        "; this version carries host memory only: copy it to the CPU");
    }
    wire::TensorMeta tm;
    tm.dtype = t->dl_tensor.dtype;
    tm.device = t->dl_tensor.device;
    tm.shape.assign(t->dl_tensor.shape, t->dl_tensor.shape + t->dl_tensor.ndim);
    tm.nbytes = nbytes.value();
    meta->tensors.push_back(std::move(tm));
    OutTensor ot;
    ot.data = static_cast<const char*>(t->dl_tensor.data) + t->dl_tensor.byte_offset;
    ot.nbytes = nbytes.value();
    ot.device = t->dl_tensor.device;
    msg->tensors.push_back(ot);
  }
  // Ownership moves to the message only once everything checked out.
  for (size_t i = 0; hand_over_tensors && i < v.tensors.size(); ++i) {
    msg->tensors[i].managed = v.tensors[i];
    v.tensors[i] = nullptr;
  }
  for (const auto& h : v.rrefs) {
    auto ref = rrefs_->Fork(*h, to);
    if (!ref.ok()) return ref.status();
    forks->push_back(ref.value());
    meta->rrefs.push_back(ref.value());
  }
  return Status::Ok();
}

Status Agent::EncodeShared(const std::shared_ptr<Value>& v, uint64_t to,
                           wire::ValueMeta* meta, OutMessage* msg,
                           std::vector<wire::RRefRef>* forks) {
  // The owner's value is sent without a copy: the message keeps the value
  // alive until its bytes left (its tensors are not handed over).
  msg->keepalive = v;
  return EncodeParts(*v, /*hand_over_tensors=*/false, to, meta, msg, forks);
}

StatusOr<Value> Agent::DecodeValue(uint64_t from, wire::ValueMeta& meta, InMessage& msg) {
  if (meta.tensors.size() != msg.segments.size()) {
    return Status(FERRY_DATA_LOSS, "malformed message: " +
                                       std::to_string(meta.tensors.size()) +
                                       " tensors described, " +
                                       std::to_string(msg.segments.size()) + " arrived");
  }
  for (size_t i = 0; i < meta.tensors.size(); ++i) {
    if (meta.tensors[i].nbytes != msg.segments[i].size) {
      return Status(FERRY_DATA_LOSS, "malformed message: tensor size mismatch");
    }
  }
  Value v;
  v.bytes = std::move(meta.bytes);
  for (size_t i = 0; i < meta.tensors.size(); ++i) {
    v.tensors.push_back(AdoptReceivedTensor(std::move(msg.segments[i]), meta.tensors[i]));
  }
  for (const auto& ref : meta.rrefs) v.rrefs.push_back(rrefs_->Receive(from, ref));
  return v;
}

// ---- outgoing calls -----------------------------------------------------------

StatusOr<uint64_t> Agent::Resolve(const std::string& to) {
  std::lock_guard<std::mutex> l(mu_);
  if (!to.empty() && to[0] == '#') {
    char* end = nullptr;
    const uint64_t id = std::strtoull(to.c_str() + 1, &end, 10);
    if (end == to.c_str() + 1 || *end != '\0' || members_.count(id) == 0) {
      return Status(FERRY_NOT_FOUND, "no worker with id " + to.substr(1) + " in job '" +
                                         options_.job + "'");
    }
    return id;
  }
  auto it = ids_by_name_.find(to);
  if (it == ids_by_name_.end()) return uint64_t{0};  // not joined yet: wait
  return it->second;
}

std::shared_ptr<Future> Agent::Call(const std::string& to, const std::string& function,
                                    Value args, milliseconds timeout) {
  wire::Request req;
  req.call_kind = wire::CallKind::kRpc;
  req.function = function;
  return StartCall(to, std::move(req), std::move(args), timeout, nullptr);
}

StatusOr<std::shared_ptr<RRefHandle>> Agent::Remote(const std::string& to,
                                                    const std::string& function,
                                                    Value args, milliseconds timeout) {
  auto target = Resolve(to);
  if (!target.ok()) return target.status();
  // The owner may not be known yet; its id is learnt by name below. An
  // RRef needs the owner's id now, so remote() to a worker not yet joined
  // waits for it (within the timeout) first.
  uint64_t owner = target.value();
  if (owner == 0) {
    const auto deadline = steady_clock::now() +
                          (timeout.count() ? timeout : options_.default_timeout);
    engine_->WaitUntil([&] { return Resolve(to).ok() && Resolve(to).value() != 0; },
                       deadline);
    auto again = Resolve(to);
    if (!again.ok() || again.value() == 0) {
      return Status(FERRY_NOT_FOUND, "no worker named '" + to + "' joined job '" +
                                         options_.job + "' in time");
    }
    owner = again.value();
  }
  if (owner == self_.id) {
    return Status(FERRY_INVALID_ARGUMENT,
                  "remote() to this worker itself: use ferry_rref_create for a local "
                  "value");
  }
  auto handle = rrefs_->CreateForRemote(owner);
  wire::Request req;
  req.call_kind = wire::CallKind::kRemote;
  req.function = function;
  req.rref = handle->rref_id();
  req.fork = handle->fork_id();
  std::weak_ptr<RRefContext> ctx = rrefs_;
  const wire::Guid rref = handle->rref_id(), fork = handle->fork_id();
  StartCall("#" + std::to_string(owner), std::move(req), std::move(args), timeout,
            [ctx, rref, fork](const Status& s) {
              auto c = ctx.lock();
              if (!c) return;
              // The owner answers remote() as soon as it recorded the fork.
              if (s.ok()) c->ConfirmRemote(rref, fork);
              else c->AbandonRemote(rref, fork);
            });
  return handle;
}

std::shared_ptr<Future> Agent::Fetch(const std::shared_ptr<RRefHandle>& rref,
                                     milliseconds timeout) {
  if (rref->is_owner()) {
    auto f = std::make_shared<Future>(engine_.get(), shared_from_this());
    auto v = LocalValue(*rref, timeout);
    if (!v.ok()) {
      f->Complete(v.status());
      return f;
    }
    // A copy, as a to_here from a user would get. Tensors are copied too.
    Value copy;
    copy.bytes = v.value()->bytes;
    for (DLManagedTensor* t : v.value()->tensors) {
      if (t == nullptr) continue;
      auto nbytes = TensorBytes(t->dl_tensor, 0);
      if (!nbytes.ok()) {
        f->Complete(nbytes.status());
        return f;
      }
      AlignedBuffer buf(nbytes.value());
      std::memcpy(buf.data, static_cast<char*>(t->dl_tensor.data) + t->dl_tensor.byte_offset,
                  nbytes.value());
      wire::TensorMeta tm;
      tm.dtype = t->dl_tensor.dtype;
      tm.shape.assign(t->dl_tensor.shape, t->dl_tensor.shape + t->dl_tensor.ndim);
      copy.tensors.push_back(AdoptReceivedTensor(std::move(buf), tm));
    }
    copy.rrefs = v.value()->rrefs;
    f->Complete(Status::Ok(), std::move(copy));
    return f;
  }
  if (rrefs_->OwnerGone(rref->owner())) {
    auto f = std::make_shared<Future>(engine_.get(), shared_from_this());
    f->Complete(Status(FERRY_PEER_GONE, "the owner of RRef " + rref->rref_id().ToString() +
                                            " (worker id " + std::to_string(rref->owner()) +
                                            ") is gone"));
    return f;
  }
  wire::Request req;
  req.call_kind = wire::CallKind::kFetch;
  req.rref = rref->rref_id();
  req.fork = rref->fork_id();
  return StartCall("#" + std::to_string(rref->owner()), std::move(req), Value(), timeout,
                   nullptr);
}

std::shared_ptr<RRefHandle> Agent::CreateRRef(Value value) {
  return rrefs_->CreateOwned(std::make_shared<Value>(std::move(value)));
}

StatusOr<std::shared_ptr<Value>> Agent::LocalValue(const RRefHandle& rref,
                                                   milliseconds timeout) {
  if (!rref.is_owner()) {
    return Status(FERRY_FAILED_PRECONDITION,
                  "local_value on a UserRRef: only the owner (worker id " +
                      std::to_string(rref.owner()) + ") holds the value; use to_here");
  }
  const wire::Guid id = rref.rref_id();
  engine_->WaitUntil([&] { return rrefs_->IsReady(id); },
                     steady_clock::now() + (timeout.count() ? timeout : options_.default_timeout));
  return rrefs_->OwnedValue(id);
}

std::shared_ptr<Future> Agent::StartCall(const std::string& to, wire::Request req,
                                         Value args, milliseconds timeout,
                                         std::function<void(const Status&)> on_settled) {
  auto future = std::make_shared<Future>(engine_.get(), shared_from_this());
  auto fail = [&](Status s) {
    if (on_settled) on_settled(s);
    future->Complete(std::move(s));
    return future;
  };
  if (stopped_.load()) {
    return fail(Status(FERRY_FAILED_PRECONDITION,
                       "worker '" + options_.name + "' has shut down: start a new one"));
  }
  if (timeout.count() == 0) timeout = options_.default_timeout;
  const auto deadline = steady_clock::now() + timeout;
  auto target = Resolve(to);
  if (!target.ok()) return fail(target.status());
  if (target.value() == self_.id && self_.id != 0) {
    return fail(Status(FERRY_INVALID_ARGUMENT,
                       "a call from worker '" + options_.name +
                           "' to itself: call the function directly"));
  }
  PendingCall pc;
  pc.future = future;
  pc.to = target.value();
  pc.to_name = to;
  pc.deadline = deadline;
  pc.on_settled = std::move(on_settled);
  uint64_t call_id;
  {
    std::lock_guard<std::mutex> l(mu_);
    call_id = next_call_id_++;
  }
  req.call_id = call_id;
  req.timeout_ms = RemainingMs(deadline);
  auto msg = std::make_unique<OutMessage>();
  msg->kind = wire::Kind::kRequest;
  if (pc.to != 0) {
    Status s = EncodeValue(args, pc.to, &req.value, msg.get(), &pc.forks);
    if (!s.ok()) {
      for (const auto& f : pc.forks) rrefs_->ForkAborted(f);
      return fail(s);
    }
    wire::Writer w(&msg->body);
    wire::Put(w, req);
  } else {
    // Encoded once the worker is known (RRef forks need the destination).
    auto held = std::make_shared<Value>(std::move(args));
    auto req_copy = std::make_shared<wire::Request>(std::move(req));
    msg->keepalive = std::shared_ptr<void>(held, held.get());
    msg->deferred = [this, held, req_copy](uint64_t dest, OutMessage* m,
                                           std::vector<wire::RRefRef>* forks) {
      Status s = EncodeValue(*held, dest, &req_copy->value, m, forks);
      if (!s.ok()) return s;
      wire::Writer w(&m->body);
      wire::Put(w, *req_copy);
      return Status::Ok();
    };
  }
  pc.unsent = std::move(msg);
  {
    std::lock_guard<std::mutex> l(mu_);
    earliest_deadline_ = std::min(earliest_deadline_, pc.deadline);
    calls_.emplace(call_id, std::move(pc));
  }
  SendPending(call_id);
  return future;
}

void Agent::SendPending(uint64_t call_id) {
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
    if (it != calls_.end()) it->second.forks = made;
    else for (const auto& f : made) rrefs_->ForkAborted(f);
  }
  if (s.ok()) s = engine_->SendToMember(to, std::move(msg));
  if (s.ok()) return;
  PendingCall pc;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = calls_.find(call_id);
    if (it == calls_.end()) return;
    pc = std::move(it->second);
    calls_.erase(it);
  }
  for (const auto& f : pc.forks) rrefs_->ForkAborted(f);
  if (pc.on_settled) pc.on_settled(s);
  pc.future->Complete(s);
}

void Agent::OnResponse(PeerKey from, InMessage& msg) {
  wire::Reader r(msg.body.data(), msg.body.size());
  wire::Response resp;
  if (!wire::Get(r, &resp)) {
    FERRY_LOG(FERRY_LOG_WARN, kLog, "malformed response from worker id " +
                                        std::to_string(from.id) + " dropped");
    return;
  }
  PendingCall pc;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = calls_.find(resp.call_id);
    if (it == calls_.end() || it->second.to != from.id) return;  // late or stray
    pc = std::move(it->second);
    calls_.erase(it);
  }
  auto value = DecodeValue(from.id, resp.value, msg);
  Status status = resp.status == FERRY_OK
                      ? (value.ok() ? Status::Ok() : value.status())
                      : Status(resp.status, resp.message);
  if (pc.on_settled) pc.on_settled(resp.status == FERRY_OK ? Status::Ok() : status);
  if (status.ok()) pc.future->Complete(Status::Ok(), std::move(value.value()));
  else pc.future->Complete(status);
}

void Agent::ExpireCalls() {
  const auto now = steady_clock::now();
  bool grace_over;
  {
    std::lock_guard<std::mutex> l(mu_);
    grace_over = !early_calls_.empty() && now >= registration_grace_until_;
  }
  if (grace_over) RedispatchEarlyCalls("");
  std::vector<PendingCall> expired;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (now < earliest_deadline_) return;
    earliest_deadline_ = steady_clock::time_point::max();
    for (auto it = calls_.begin(); it != calls_.end();) {
      if (now >= it->second.deadline) {
        expired.push_back(std::move(it->second));
        it = calls_.erase(it);
      } else {
        earliest_deadline_ = std::min(earliest_deadline_, it->second.deadline);
        ++it;
      }
    }
  }
  for (auto& pc : expired) {
    Status s = pc.to == 0
        ? Status(FERRY_NOT_FOUND, "no worker named '" + pc.to_name + "' joined job '" +
                                      options_.job + "' before the call's deadline")
        : Status(FERRY_DEADLINE_EXCEEDED,
                 "no reply from worker '" + pc.to_name + "' before the deadline "
                 "(raise the timeout if the function is slow)");
    if (pc.to == 0) {
      // Never sent: its RRef forks are undone with the unsent message.
      for (const auto& f : pc.forks) rrefs_->ForkAborted(f);
    }
    if (pc.on_settled) pc.on_settled(s);
    pc.future->Complete(s);
  }
}

void Agent::FailCallsTo(uint64_t id, const Status& why) {
  std::vector<PendingCall> failed;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = calls_.begin(); it != calls_.end();) {
      if (it->second.to == id) {
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

// ---- incoming ------------------------------------------------------------------

void Agent::OnMessage(PeerKey from, std::unique_ptr<InMessage> msg) {
  switch (msg->envelope.kind) {
    case wire::Kind::kRequest:
      OnRequest(from, *msg);
      return;
    case wire::Kind::kResponse:
      OnResponse(from, *msg);
      return;
    case wire::Kind::kControl: {
      wire::Reader r(msg->body.data(), msg->body.size());
      wire::Control c;
      if (wire::Get(r, &c)) rrefs_->OnControl(from.id, from.incarnation, c);
      return;
    }
    case wire::Kind::kControlAck: {
      wire::Reader r(msg->body.data(), msg->body.size());
      const uint32_t n = r.Count(8);
      for (uint32_t i = 0; i < n && r.ok(); ++i) {
        const uint64_t id = r.U64();
        if (r.ok()) rrefs_->OnControlAck(from.id, id);
      }
      return;
    }
    default:
      FERRY_LOG(FERRY_LOG_DEBUG, kLog, "unexpected message kind ignored");
  }
}

void Agent::OnRequest(PeerKey from, InMessage& msg) {
  wire::Reader r(msg.body.data(), msg.body.size());
  wire::Request req;
  if (!wire::Get(r, &req)) {
    FERRY_LOG(FERRY_LOG_WARN, kLog, "malformed request from worker id " +
                                        std::to_string(from.id) + " dropped");
    return;
  }
  if (stopped_.load()) {
    Respond(from, req.call_id,
            Status(FERRY_UNAVAILABLE, "worker '" + options_.name + "' is shutting down"),
            nullptr);
    return;
  }
  if (req.call_kind == wire::CallKind::kFetch) {
    std::weak_ptr<Agent> weak = weak_from_this();
    const uint64_t call_id = req.call_id;
    rrefs_->WhenReady(req.rref, [weak, from, call_id](const Status& s,
                                                      std::shared_ptr<Value> v) {
      auto a = weak.lock();
      if (!a) return;
      if (!s.ok()) a->Respond(from, call_id, s, nullptr);
      else a->Respond(from, call_id, Status::Ok(), nullptr, v);
    });
    return;
  }
  HandlerEntry entry;
  bool found = false;
  std::string known;
  std::string caller_name;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (auto m = members_.find(from.id); m != members_.end()) caller_name = m->second.name;
    auto it = handlers_.find(req.function);
    if (it != handlers_.end()) {
      entry = it->second;
      found = true;
    } else if (steady_clock::now() < registration_grace_until_) {
      early_calls_.push_back(
          EarlyCall{from, std::make_shared<InMessage>(std::move(msg)), req.function});
      return;
    } else {
      for (const auto& [name, h] : handlers_) known += (known.empty() ? "" : ", ") + name;
    }
  }
  if (req.call_kind == wire::CallKind::kRemote) {
    // Record the caller's fork and confirm it at once (the answer to a
    // remote() call is the owner's acknowledgement of {RRefId, ForkId}).
    rrefs_->OwnerAddFork(req.rref, req.fork, from.id);
  }
  auto value = DecodeValue(from.id, req.value, msg);
  Status problem;
  if (!found) {
    problem = Status(FERRY_NOT_FOUND, "no function '" + req.function +
                                          "' is registered on worker '" + options_.name +
                                          "' (registered: " +
                                          (known.empty() ? "none" : known) + ")");
  } else if (!value.ok()) {
    problem = value.status();
  }
  auto call = std::unique_ptr<IncomingCall>(new IncomingCall());
  call->agent_ = shared_from_this();
  call->from_ = from;
  call->function_ = req.function;
  call->call_id_ = req.call_id;
  call->kind_ = req.call_kind;
  call->rref_ = req.rref;
  call->caller_name_ = std::move(caller_name);
  if (req.call_kind == wire::CallKind::kRemote) {
    Respond(from, req.call_id, Status::Ok(), nullptr);
  }
  serving_.fetch_add(1);
  if (!problem.ok()) {
    call->Fail(problem);
    return;
  }
  if (!entry.may_block) {
    (*entry.fn)(std::move(call), std::move(value.value()));
    return;
  }
  executor_->Post([fn = std::move(entry.fn), c = call.release(),
                   v = std::make_shared<Value>(std::move(value.value()))]() mutable {
    (*fn)(std::unique_ptr<IncomingCall>(c), std::move(*v));
  });
}

void Agent::Respond(const PeerKey& to, uint64_t call_id, Status status, Value* value,
                    const std::shared_ptr<Value>& shared) {
  wire::Response resp;
  resp.call_id = call_id;
  resp.status = status.code();
  resp.message = status.message();
  auto msg = std::make_unique<OutMessage>();
  msg->kind = wire::Kind::kResponse;
  std::vector<wire::RRefRef> forks;
  Status s;
  if (status.ok() && value != nullptr) {
    s = EncodeValue(*value, to.id, &resp.value, msg.get(), &forks);
  } else if (status.ok() && shared) {
    s = EncodeShared(shared, to.id, &resp.value, msg.get(), &forks);
  }
  if (!s.ok()) {
    for (const auto& f : forks) rrefs_->ForkAborted(f);
    forks.clear();
    msg = std::make_unique<OutMessage>();
    msg->kind = wire::Kind::kResponse;
    resp.status = s.code();
    resp.message = "the result could not be sent: " + s.message();
    resp.value = wire::ValueMeta();
  }
  wire::Writer w(&msg->body);
  wire::Put(w, resp);
  s = engine_->SendToMember(to.id, std::move(msg));
  if (!s.ok()) {
    for (const auto& f : forks) rrefs_->ForkAborted(f);
    FERRY_LOG(FERRY_LOG_DEBUG, kLog, "reply not sent: " + s.ToString());
  }
}

// ---- IncomingCall --------------------------------------------------------------

Status IncomingCall::Reply(Value result) {
  if (answered_.exchange(true)) {
    return Status(FERRY_FAILED_PRECONDITION, "this call was answered already");
  }
  if (kind_ == wire::CallKind::kRemote) {
    agent_->rrefs_->OwnerSetValue(rref_, Status::Ok(),
                                  std::make_shared<Value>(std::move(result)));
  } else {
    agent_->Respond(from_, call_id_, Status::Ok(), &result);
  }
  agent_->serving_.fetch_sub(1);
  return Status::Ok();
}

Status IncomingCall::Fail(Status error) {
  if (answered_.exchange(true)) {
    return Status(FERRY_FAILED_PRECONDITION, "this call was answered already");
  }
  if (error.ok()) error = Status(FERRY_UNKNOWN, "the handler failed without a status");
  if (kind_ == wire::CallKind::kRemote) {
    agent_->rrefs_->OwnerSetValue(rref_, error, nullptr);
  } else {
    agent_->Respond(from_, call_id_, error, nullptr);
  }
  agent_->serving_.fetch_sub(1);
  return Status::Ok();
}

IncomingCall::~IncomingCall() {
  // A handler that dropped its call without answering: answer for it, so
  // the caller gets an error now rather than at its deadline.
  if (!answered_.load() && agent_) {
    Fail(Status(FERRY_INTERNAL, "function '" + function_ +
                                    "' returned without answering its call"));
  }
}

}  // namespace ferry
