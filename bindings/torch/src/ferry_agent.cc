// FerryAgent (ferry_agent.h).
#include "ferry_agent.h"

#include "message_codec.h"

#include <torch/csrc/distributed/rpc/request_callback_impl.h>
#include <torch/csrc/distributed/rpc/utils.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

namespace ferry_torch {
namespace {

using torch::distributed::rpc::JitFuture;
using torch::distributed::rpc::Message;
using torch::distributed::rpc::worker_id_t;
using torch::distributed::rpc::WorkerInfo;

constexpr const char* kFunction = "torch";  // the one ferry function

// torch's timeout in seconds as ferry's in milliseconds: torch's 0 means no
// limit, ferry's 0 means "the worker's default", so 0 becomes ferry's
// largest (about 49 days).
uint32_t FerryTimeoutMs(std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0 ||
      timeout.count() >= static_cast<int64_t>(std::numeric_limits<uint32_t>::max())) {
    return std::numeric_limits<uint32_t>::max();
  }
  return static_cast<uint32_t>(timeout.count());
}

[[noreturn]] void ThrowFerry(const std::string& what, ferry_status_t code) {
  TORCH_CHECK(false, what, ": ", ferry_status_name(code), ": ", ferry_last_error());
  std::abort();  // unreachable: TORCH_CHECK(false) throws
}

void SetError(JitFuture& future, const std::string& message) {
  future.setErrorIfNeeded(std::make_exception_ptr(std::runtime_error(message)));
}

// Every worker `w` knows, copied out of ferry's table.
std::vector<ferry::MemberView> Members(ferry_worker_t* w) {
  uint32_t n = 0;
  ferry_worker_members(w, nullptr, 0, &n);
  std::vector<ferry_member_t> raw(n + 8);
  raw[0].struct_size = FERRY_MEMBER_STRUCT_SIZE;
  ferry_worker_members(w, raw.data(), static_cast<uint32_t>(raw.size()), &n);
  std::vector<ferry::MemberView> out;
  for (uint32_t i = 0; i < n && i < raw.size(); ++i) {
    out.push_back({raw[i].state, raw[i].id, raw[i].incarnation, raw[i].name,
                   raw[i].transport, raw[i].rank});
  }
  return out;
}

}  // namespace

FerryAgent::FerryAgent(std::string name, int rank, int world_size,
                       FerryAgentOptions options)
    : RpcAgent(WorkerInfo(std::move(name), static_cast<int64_t>(rank)),
               std::make_unique<torch::distributed::rpc::RequestCallbackImpl>(),
               std::chrono::milliseconds(
                   static_cast<int64_t>(std::lround(options.rpc_timeout_s * 1000.0f)))),
      options_(std::move(options)),
      pool_(std::make_unique<c10::ThreadPool>(
          static_cast<int>(std::max<uint32_t>(1, options_.num_worker_threads)))) {
  TORCH_CHECK(world_size > 0,
              "the FERRY rpc backend runs static jobs only: init_rpc needs a world_size "
              "(a dynamic group, without one, is not supported)");
  const std::string& self = workerInfo_.name_;
  ferry_worker_options_t o{};
  o.struct_size = FERRY_WORKER_OPTIONS_STRUCT_SIZE;
  o.flags = (options_.host_store ? FERRY_WORKER_HOST_STORE : 0) |
            (options_.busy_poll ? FERRY_WORKER_BUSY_POLL : 0);
  o.name = self.c_str();
  o.job = options_.job.empty() ? nullptr : options_.job.c_str();
  o.transport = options_.transport.c_str();
  o.store_address = options_.store.empty() ? nullptr : options_.store.c_str();
  o.secret = options_.secret.empty() ? nullptr : options_.secret.c_str();
  o.default_timeout_ms = FerryTimeoutMs(getRpcTimeout());
  o.peer_timeout_ms = static_cast<uint32_t>(options_.peer_timeout.count());
  o.join_timeout_ms = static_cast<uint32_t>(options_.join_timeout.count());
  o.world_size = static_cast<uint32_t>(world_size);
  o.rank = rank;
  o.start_timeout_ms = static_cast<uint32_t>(options_.start_timeout.count());
  // ferry's reason names what failed (a name taken, the store's address
  // in use, ...); repeated names are refused before this, through torch's
  // store (ferry/torch.py).
  const ferry_status_t s = ferry_worker_start(&o, &worker_);
  if (s != FERRY_OK) {
    ThrowFerry(c10::str("FERRY rpc: worker ", self, " (rank ", rank, " of ", world_size,
                        ") could not join the job"),
               s);
  }
  self_id_ = ferry_worker_id(worker_);
  // Registered before any peer can call it: the Python side waits for
  // every rank to reach this point (a store barrier) before init_rpc returns.
  const ferry_status_t r =
      ferry_register(worker_, kFunction, &FerryAgent::OnRequest, this, 0);
  if (r != FERRY_OK) {
    ferry_worker_destroy(std::exchange(worker_, nullptr));
    ThrowFerry("FERRY rpc: cannot register the torch handler", r);
  }

  // Every rank joined before start returned: the members are the job.
  for (const ferry::MemberView& m : Members(worker_)) {
    if (m.rank < 0) continue;
    WorkerInfo info(m.name, static_cast<int64_t>(m.rank));
    by_name_.emplace(info.name_, info);
    by_id_.emplace(info.id_, info);
  }
  TORCH_CHECK(static_cast<int>(by_id_.size()) == world_size, "FERRY rpc: the job has ",
              by_id_.size(), " ranks known to worker ", self, ", expected ", world_size);
}

FerryAgent::~FerryAgent() {
  shutdown();  // RpcAgent::shutdown: calls shutdownImpl once, if running
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    stopped_ = true;
  }
  state_cv_.notify_all();
  if (worker_ != nullptr) ferry_worker_destroy(std::exchange(worker_, nullptr));
  if (pool_) pool_->waitWorkComplete();
}

const WorkerInfo& FerryAgent::getWorkerInfo(const std::string& name) const {
  auto it = by_name_.find(name);
  TORCH_CHECK(it != by_name_.end(), "name:", workerInfo_.name_, ",rank:", workerInfo_.id_,
              " could not find destination name ", name, " among the job's ",
              by_name_.size(), " workers");
  return it->second;
}

const WorkerInfo& FerryAgent::getWorkerInfo(worker_id_t id) const {
  auto it = by_id_.find(id);
  TORCH_CHECK(it != by_id_.end(), "name:", workerInfo_.name_, ",rank:", workerInfo_.id_,
              " could not find destination id ", id, " among the job's ", by_id_.size(),
              " workers");
  return it->second;
}

std::vector<WorkerInfo> FerryAgent::getWorkerInfos() const {
  std::vector<WorkerInfo> out;
  for (worker_id_t id = 0; id < static_cast<worker_id_t>(by_id_.size()); ++id) {
    auto it = by_id_.find(id);
    if (it != by_id_.end()) out.push_back(it->second);
  }
  return out;
}

void FerryAgent::startImpl() {
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    started_ = true;
  }
  state_cv_.notify_all();
}

bool FerryAgent::AwaitStart() {
  std::unique_lock<std::mutex> lock(state_mu_);
  state_cv_.wait(lock, [&] { return started_ || stopped_; });
  return !stopped_;
}

void FerryAgent::shutdownImpl() {
  // A graceful shutdown left the job in join(); otherwise (shutdown with
  // graceful=False, or an error) leave at once: peers in the barrier see
  // this worker gone.
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    stopped_ = true;
  }
  state_cv_.notify_all();
  if (worker_ != nullptr) ferry_worker_shutdown_ex(worker_, FERRY_SHUTDOWN_IMMEDIATE, 0);
  // ferry failed our pending calls (CANCELLED); their futures complete on
  // the pool.
  pool_->waitWorkComplete();
}

void FerryAgent::join(bool shutdown, float timeout) {
  if (!shutdown) {
    std::unique_lock<std::mutex> lock(state_mu_);
    state_cv_.wait(lock, [&] {
      return stopped_ ||
             (client_active_calls_.load() == 0 && server_active_calls_.load() == 0);
    });
    return;
  }
  const uint32_t ms = timeout <= 0 ? FERRY_NO_TIMEOUT
                                   : static_cast<uint32_t>(std::min<double>(
                                         timeout * 1000.0, FERRY_NO_TIMEOUT - 1));
  ferry_status_t s = ferry_worker_shutdown_ex(worker_, FERRY_SHUTDOWN_GRACEFUL, ms);
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    left_ = true;
  }
  if (s != FERRY_OK) ThrowFerry("FERRY rpc: the job-wide shutdown failed", s);
}

c10::intrusive_ptr<JitFuture> FerryAgent::send(
    const WorkerInfo& to, c10::intrusive_ptr<Message> message,
    const float rpc_timeout_seconds,
    const torch::distributed::rpc::DeviceMap& device_map) {
  TORCH_CHECK(message->isRequest(), "FerryAgent::send(..) is only for sending requests.");
  TORCH_CHECK(
      device_map.empty(),
      "the FERRY rpc backend has no device maps (CPU tensors only in torch 1.13)");
  if (!rpcAgentRunning_.load()) {
    TORCH_CHECK(false, "Node ", workerInfo_.id_, " tried to send() a message of type ",
                message->type(), " but RPC is no longer running on this node.");
  }
  const auto timeout = rpc_timeout_seconds == torch::distributed::rpc::kUnsetRpcTimeout
                           ? getRpcTimeout()
                           : std::chrono::milliseconds(static_cast<int64_t>(
                                 std::lround(rpc_timeout_seconds * 1000)));
  const uint32_t timeout_ms = FerryTimeoutMs(timeout);
  auto future = c10::make_intrusive<JitFuture>(at::AnyClassType::get(), getDevices());

  ferry::Payload payload = EncodeMessage(*message);
  // A call to this worker itself is served from the payload ferry hands
  // over: zero-copy would let the handler write into the caller's tensors.
  if (options_.zero_copy && to.id_ != workerInfo_.id_) payload.ZeroCopy();
  ferry_future_t* f = nullptr;
  const ferry_status_t s =
      ferry_rpc_async(worker_, to.name_.c_str(), kFunction, payload.c(), timeout_ms, &f);
  payload.Released();
  if (s != FERRY_OK) {
    SetError(*future, c10::str("FERRY rpc to ", to.name_, " failed: ",
                               ferry_status_name(s), ": ", ferry_last_error()));
    return future;
  }
  ++client_active_calls_;
  ferry_future_then(f, &FerryAgent::OnReply,
                    new PendingCall{this, to.name_, timeout_ms, future});
  return future;
}

void FerryAgent::OnReply(void* user_data, ferry_future_t* f) {
  std::unique_ptr<PendingCall> call(static_cast<PendingCall*>(user_data));
  FerryAgent* self = call->agent;
  // Torch's future callbacks may block: complete it on the pool.
  self->pool_->run([self, f, c = std::shared_ptr<PendingCall>(std::move(call))] {
    self->Complete(f, *c);
    ferry_future_release(f);
    self->CallEnded(self->client_active_calls_);
  });
}

void FerryAgent::Complete(ferry_future_t* f, const PendingCall& call) {
  const char* why = nullptr;
  const ferry_status_t s = ferry_future_status(f, &why);
  JitFuture& future = *call.future;
  if (s == FERRY_DEADLINE_EXCEEDED) {
    // torch's RRef and autograd layers tell a timeout by this form.
    // torch's own wording (kRpcTimeoutErrorStr), with the limit filled in.
    std::string text = torch::distributed::rpc::kRpcTimeoutErrorStr;
    text.replace(text.find("{}"), 2, std::to_string(call.timeout_ms));
    SetError(future, torch::distributed::rpc::makeRPCError(
                         text, torch::distributed::rpc::RPCErrorType::TIMEOUT));
    return;
  }
  if (s != FERRY_OK) {
    SetError(future, c10::str("FERRY rpc to ", call.to, " failed: ", ferry_status_name(s),
                              ": ", why ? why : ""));
    return;
  }
  try {
    ferry_message_t* raw = nullptr;
    ferry::Check(ferry_future_take(f, &raw));
    ferry::Message reply(raw);
    c10::intrusive_ptr<Message> response = DecodeMessage(reply);
    if (response->type() == torch::distributed::rpc::MessageType::EXCEPTION) {
      SetError(future,
               std::string(response->payload().begin(), response->payload().end()));
      return;
    }
    auto storages = response->getStorages();
    future.markCompleted(c10::IValue(std::move(response)), std::move(storages));
  } catch (const std::exception& e) {
    SetError(future, c10::str("FERRY rpc: the reply from ", call.to,
                              " could not be read: ", e.what()));
  }
}

void FerryAgent::CallEnded(std::atomic<int64_t>& counter) {
  if (--counter == 0) {
    // join(shutdown=false) waits for both counters to reach zero.
    std::lock_guard<std::mutex> lock(state_mu_);
    state_cv_.notify_all();
  }
}

void FerryAgent::OnRequest(void* user_data, ferry_call_t* call, ferry_message_t* args) {
  auto* self = static_cast<FerryAgent*>(user_data);
  c10::intrusive_ptr<Message> request;
  try {
    ferry::Message borrowed = ferry::Message::Borrow(args);
    request = DecodeMessage(borrowed);
  } catch (const std::exception& e) {
    ferry_call_fail(call, FERRY_INVALID_ARGUMENT, e.what());
    return;
  }
  ++self->server_active_calls_;
  self->pool_->run([self, call, request = std::move(request)]() mutable {
    self->Serve(call, std::move(request));
  });
}

void FerryAgent::Serve(ferry_call_t* call, c10::intrusive_ptr<Message> request) {
  if (!AwaitStart()) {
    ferry_call_fail(call, FERRY_CANCELLED,
                    "the FERRY rpc agent shut down before it served the call");
    CallEnded(server_active_calls_);
    return;
  }
  c10::intrusive_ptr<JitFuture> result;
  try {
    result = (*cb_)(*request, {});
  } catch (const std::exception&) {
    result = c10::make_intrusive<JitFuture>(at::AnyClassType::get());
    result->setError(std::current_exception());
  }
  const bool async = !result->completed();
  if (async) ++server_active_async_calls_;
  result->addCallback([this, call, async](JitFuture& done) {
    Respond(call, done);
    if (async) --server_active_async_calls_;
    CallEnded(server_active_calls_);
  });
}

void FerryAgent::Respond(ferry_call_t* call, JitFuture& result) {
  c10::intrusive_ptr<Message> response;
  if (result.hasError()) {
    response = torch::distributed::rpc::createExceptionResponse(
        result.tryRetrieveErrorMessage(), -1);
  } else {
    response = result.value().toCustomClass<Message>();
  }
  ferry::Payload payload;
  try {
    payload = EncodeMessage(*response);
  } catch (const std::exception& e) {
    payload =
        EncodeMessage(*torch::distributed::rpc::createExceptionResponse(e.what(), -1));
  }
  if (options_.zero_copy && ferry_call_caller_id(call) != self_id_) {
    payload.ZeroCopy();  // not to this worker itself: see send()
  }
  const ferry_status_t s = ferry_call_reply(call, payload.c());
  payload.Released();
  if (s != FERRY_OK) {
    LOG(WARNING) << "FERRY rpc: the reply to a call could not be sent: "
                 << ferry_status_name(s) << ": " << ferry_last_error();
  }
}

std::unordered_map<std::string, std::string> FerryAgent::getMetrics() {
  std::unordered_map<std::string, std::string> m;
  m["agent.thread_pool_size"] = std::to_string(pool_->size());
  m["agent.num_idle_threads"] = std::to_string(pool_->numAvailable());
  m["agent.client_active_calls"] = std::to_string(client_active_calls_.load());
  m["agent.server_active_calls"] = std::to_string(server_active_calls_.load());
  m["agent.server_active_async_calls"] =
      std::to_string(server_active_async_calls_.load());
  if (isGILProfilingEnabled()) {
    const uint64_t n = gil_wait_count_.load();
    m["agent.gil_average_wait_time_us"] =
        std::to_string(n == 0 ? 0.0 : static_cast<double>(gil_wait_us_sum_.load()) / n);
  }
  return m;
}

std::unordered_map<std::string, std::string> FerryAgent::getDebugInfo() {
  std::unordered_map<std::string, std::string> info = getMetrics();
  info["agent.backend"] = "FERRY";
  info["agent.transport"] = options_.transport;
  if (worker_ != nullptr) {
    ferry_worker_stats_t st{};
    st.struct_size = FERRY_WORKER_STATS_STRUCT_SIZE;
    if (ferry_worker_get_stats(worker_, &st) == FERRY_OK) {
      info["ferry.pending_calls"] = std::to_string(st.pending_calls);
      info["ferry.dropped_calls"] = std::to_string(st.dropped_calls);
      info["ferry.snapshot_tensors"] = std::to_string(st.snapshot_tensors);
      info["ferry.snapshot_bytes"] = std::to_string(st.snapshot_bytes);
      info["ferry.refused_connections"] = std::to_string(st.refused_connections);
    }
    for (const auto& [peer, transport] : peerTransports()) {
      info["ferry.transport." + peer] = transport;
    }
  }
  return info;
}

std::unordered_map<std::string, std::string> FerryAgent::peerTransports() const {
  std::unordered_map<std::string, std::string> out;
  if (worker_ == nullptr) return out;
  for (const ferry::MemberView& m : Members(worker_)) out[m.name] = m.transport;
  return out;
}

void FerryAgent::addGilWaitTime(const std::chrono::microseconds gil_wait_time) {
  gil_wait_us_sum_ += static_cast<uint64_t>(gil_wait_time.count());
  ++gil_wait_count_;
}

}  // namespace ferry_torch
