// ferry::Agent (agent.h): the calling API — registering functions, call,
// remote() and to_here() — over the incoming and outgoing call tables and
// the RRef context.
#include "agent/agent.h"

namespace ferry {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

Status Agent::Register(const std::string& function, Handler handler, bool may_block) {
  return incoming_->Register(function, std::move(handler), may_block);
}

std::shared_ptr<Future> Agent::Call(const std::string& to, const std::string& function,
                                    Value args, milliseconds timeout) {
  wire::Request req;
  req.call_kind = wire::CallKind::kRpc;
  req.function = function;
  return calls_->Start(to, std::move(req), std::move(args), timeout, nullptr);
}

StatusOr<std::shared_ptr<RRefHandle>> Agent::Remote(const std::string& to,
                                                    const std::string& function,
                                                    Value args, milliseconds timeout) {
  auto target = members_.Resolve(to);
  if (!target.ok()) return target.status();
  // The owner may not be known yet; its id is learnt by name below. An
  // RRef needs the owner's id now, so remote() to a worker not yet joined
  // waits for it (within the timeout) first.
  uint64_t owner = target.value();
  if (owner == 0 && options_.world_size > 0) return calls_->UnknownInStaticJob(to);
  if (owner == 0) {
    const auto deadline =
        steady_clock::now() + (timeout.count() ? timeout : options_.default_timeout);
    engine_->WaitUntil(
        [&] { return members_.Resolve(to).ok() && members_.Resolve(to).value() != 0; },
        deadline);
    auto again = members_.Resolve(to);
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
  calls_->Start("#" + std::to_string(owner), std::move(req), std::move(args), timeout,
                [ctx, rref, fork](const Status& s) {
                  auto c = ctx.lock();
                  if (!c) return;
                  // The owner answers remote() as soon as it recorded the fork.
                  if (s.ok())
                    c->ConfirmRemote(rref, fork);
                  else
                    c->AbandonRemote(rref, fork);
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
    auto copy = CopyValue(*v.value(), engine_->device_memory());
    if (!copy.ok())
      f->Complete(copy.status());
    else
      f->Complete(Status::Ok(), std::move(copy.value()));
    return f;
  }
  if (rrefs_->OwnerGone(rref->owner())) {
    auto f = std::make_shared<Future>(engine_.get(), shared_from_this());
    f->Complete(Status(FERRY_PEER_GONE, "the owner of RRef " +
                                            rref->rref_id().ToString() + " (worker id " +
                                            std::to_string(rref->owner()) + ") is gone"));
    return f;
  }
  wire::Request req;
  req.call_kind = wire::CallKind::kFetch;
  req.rref = rref->rref_id();
  req.fork = rref->fork_id();
  return calls_->Start("#" + std::to_string(rref->owner()), std::move(req), Value(),
                       timeout, nullptr);
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
  engine_->WaitUntil(
      [&] { return rrefs_->IsReady(id); },
      steady_clock::now() + (timeout.count() ? timeout : options_.default_timeout));
  return rrefs_->OwnedValue(id);
}

}  // namespace ferry
