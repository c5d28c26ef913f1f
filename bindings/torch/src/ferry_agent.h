// FerryAgent: a torch::distributed::rpc::RpcAgent whose messages travel as
// ferry calls (torch 1.13's agent contract, rpc_agent.h).
//
// torch's layers above the agent (RRefs, distributed autograd, the Python
// API) only ask an agent to send a request Message to a worker and to hand
// the reply (or an error) back through a future; to give every request it
// receives to torch's RequestCallback; and to know the job's workers. Each
// torch request is one ferry call of the function "torch" on the worker of
// that name; its reply is the call's result. ferry correlates replies,
// enforces the deadline, and fails the call when the peer dies, so the
// agent needs no message ids, timeout thread or connection table of its
// own. The job is a ferry static job (world_size, rank): start returns once
// every rank joined, and join(shutdown=true) is ferry's job-wide barrier.
//
// Threading, as TensorPipe's agent: ferry calls the agent back on its own
// threads, which must not block; torch's callbacks may (a Python UDF takes
// the GIL, waits on nested calls). So a request is decoded where it
// arrives and then served on the agent's thread pool (num_worker_threads),
// and a reply completes its torch future on that pool too.
#pragma once

#include <c10/core/thread_pool.h>
#include <torch/csrc/distributed/rpc/rpc_agent.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <ferry/ferry.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace ferry_torch {

struct FerryAgentOptions {
  std::string transport = "auto";  // a ferry plugin name, a comma list, "auto"
  std::string store;               // ferry's rendezvous store, "host:port"
  bool host_store = false;         // this worker hosts it (rank 0)
  std::string job;                 // "" = FERRY_JOB or "default"
  std::string secret;              // the job's secret; "" = ferry's default
  float rpc_timeout_s = torch::distributed::rpc::kDefaultRpcTimeoutSeconds;
  uint32_t num_worker_threads = 16;
  std::chrono::milliseconds peer_timeout{0};   // 0 = ferry's default (3 s)
  std::chrono::milliseconds start_timeout{0};  // 0 = ferry's (5 minutes)
  std::chrono::milliseconds join_timeout{0};   // reaching the store
  // Tensors are sent from their own memory, as TensorPipe sends them (do
  // not write an argument until its future is done); false: ferry sends a
  // copy taken when the call is made.
  bool zero_copy = true;
  // ferry's progress thread spins instead of sleeping in epoll between
  // messages (FERRY_WORKER_BUSY_POLL), as TensorPipe's shared-memory
  // transport does: lower latency, one busy core per worker.
  bool busy_poll = false;
};

class FerryAgent final : public torch::distributed::rpc::RpcAgent {
 public:
  // Joins the static job as `rank` of `world_size` and learns every
  // worker's name; returns once all have joined. Requests that arrive
  // before start() wait for it. Throws c10::Error with ferry's reason.
  FerryAgent(std::string name, int rank, int world_size, FerryAgentOptions options);
  ~FerryAgent() override;

  c10::intrusive_ptr<torch::distributed::rpc::JitFuture> send(
      const torch::distributed::rpc::WorkerInfo& to,
      c10::intrusive_ptr<torch::distributed::rpc::Message> message,
      const float rpc_timeout_seconds = torch::distributed::rpc::kUnsetRpcTimeout,
      const torch::distributed::rpc::DeviceMap& device_map = {}) override;

  using RpcAgent::getWorkerInfo;
  const torch::distributed::rpc::WorkerInfo& getWorkerInfo(
      const std::string& name) const override;
  const torch::distributed::rpc::WorkerInfo& getWorkerInfo(
      torch::distributed::rpc::worker_id_t id) const override;
  std::vector<torch::distributed::rpc::WorkerInfo> getWorkerInfos() const override;

  // shutdown=true: ferry's job-wide barrier (every rank's pending calls
  // finish, every rank arrives), after which this worker has left the job.
  // shutdown=false: waits until this worker has no call in flight either
  // way (torch only joins without shutting down in the agent's own tests).
  void join(bool shutdown = false, float timeout = 0) override;
  void sync() override {}
  void startImpl() override;
  void shutdownImpl() override;

  std::unordered_map<std::string, std::string> getMetrics() override;
  std::unordered_map<std::string, std::string> getDebugInfo() override;

  const FerryAgentOptions& options() const { return options_; }
  // The transport that reaches each peer ("self" for this worker).
  std::unordered_map<std::string, std::string> peerTransports() const;

 private:
  void addGilWaitTime(const std::chrono::microseconds gil_wait_time) override;

  // ferry's handler for "torch": runs on a ferry thread, must not block.
  static void OnRequest(void* user_data, ferry_call_t* call, ferry_message_t* args);
  void Serve(ferry_call_t* call,
             c10::intrusive_ptr<torch::distributed::rpc::Message> request);
  void Respond(ferry_call_t* call, torch::distributed::rpc::JitFuture& result);
  // A request in flight, from send() to its reply.
  struct PendingCall {
    FerryAgent* agent;
    std::string to;
    uint32_t timeout_ms;
    c10::intrusive_ptr<torch::distributed::rpc::JitFuture> future;
  };
  // ferry's continuation of a sent request: runs on a ferry thread.
  static void OnReply(void* user_data, ferry_future_t* f);
  void Complete(ferry_future_t* f, const PendingCall& call);
  void CallEnded(std::atomic<int64_t>& counter);

  // Blocks until start() ran (true) or the agent shut down (false).
  bool AwaitStart();

  const FerryAgentOptions options_;
  ferry_worker_t* worker_ = nullptr;  // owned: ferry_worker_destroy
  uint64_t self_id_ = 0;              // its ferry member id
  std::unique_ptr<c10::ThreadPool> pool_;
  std::unordered_map<std::string, torch::distributed::rpc::WorkerInfo> by_name_;
  std::unordered_map<torch::distributed::rpc::worker_id_t,
                     torch::distributed::rpc::WorkerInfo>
      by_id_;

  std::mutex state_mu_;
  std::condition_variable state_cv_;
  bool started_ = false;
  bool stopped_ = false;
  bool left_ = false;  // the ferry worker left the job (join's barrier)

  std::atomic<int64_t> client_active_calls_{0};
  std::atomic<int64_t> server_active_calls_{0};
  std::atomic<int64_t> server_active_async_calls_{0};
  std::atomic<uint64_t> gil_wait_us_sum_{0};
  std::atomic<uint64_t> gil_wait_count_{0};
};

}  // namespace ferry_torch
