// progress(): the host's manual progress. Reads the completion queue (which
// is also what drives the provider: libfabric's manual progress model), then
// retries whatever met a full queue, expires deadlines, and returns queued
// events.
#include "context.h"

#include "fi_error.h"

#include "ferry_plugin/log.h"

#include <rdma/fi_errno.h>

#include <algorithm>

namespace ferry_fabric {
namespace {

// Completions read per fi_cq_read, and batches per progress(): enough to
// drain a burst, bounded so one call never runs away.
constexpr size_t kCqBatch = 32;
constexpr int kCqRounds = 16;

}  // namespace

ferry_status_t Context::Progress(ferry_progress_args_t* args, Status* error) {
  args->num_events = 0;
  if (args->max_events > 0 &&
      (args->events == nullptr || args->event_stride < FERRY_EVENT_STRUCT_SIZE)) {
    return Report(error,
                  Error(FERRY_INVALID_ARGUMENT,
                        "fabric: progress() needs an events array and event_stride "
                        ">= %zu (got %p, %llu)",
                        FERRY_EVENT_STRUCT_SIZE, static_cast<void*>(args->events),
                        static_cast<unsigned long long>(args->event_stride)));
  }
  // Each step is looked at before it is called: a busy host spins here, and
  // the spin's length is how late the next message is noticed.
  if (!retired_.empty()) FreeRetired();
  events_.ForgetDelivered();
  // What was queued before this call goes first; arrivals read below may
  // then be written straight into the host's array (DeliverArrival). The
  // array is closed again on every way out, an exception included: after
  // progress() returns, an arrival delivered from discard() must be queued.
  host_events_.Open(args, events_.Empty() ? 0 : Deliver(args, 0));
  struct CloseHostEvents {
    ferry_plugin::HostEvents* events;
    ~CloseHostEvents() { events->Close(); }
  } close_host_events{&host_events_};
  if (RxWantsBuffers()) RepostRx();  // first: the provider gets them back
  ReadCq();
  if (RxLow()) RepostRx();  // a burst took half the window
  if (resend_head_ != nullptr) DrainResends();
  if (!pending_control_.empty()) DrainPendingControl();
  if (!tx_retry_.empty()) PumpTxRetries();
  if (reads_head_ != nullptr) PumpReads();
  if (!streaming_.empty()) PumpStreams();
  if (deadlines_ > 0) {
    if (has_wakeup_) wakeup_.DrainTimer();
    CheckDeadlines();
  }
  if (sweep_pending_) {
    if (config_.cloexec_sweep) fd_sweeper_.Sweep();
    sweep_pending_ = false;
  }
  uint32_t delivered = host_events_.Close();
  if (!events_.Empty()) delivered += Deliver(args, delivered);
  args->num_events = delivered;
  if (has_wakeup_) wakeup_.Settle(HasWork(), endpoint_->fabric(), endpoint_->cq());
  return FERRY_OK;
}

void Context::ReadCq() {
  fi_cq_msg_entry entries[kCqBatch];
  for (int round = 0; round < kCqRounds; ++round) {
    ssize_t n = fi_cq_read(endpoint_->cq(), entries, kCqBatch);
    if (n == -FI_EAGAIN) return;
    if (n == -FI_EAVAIL) {
      HandleCqError();
      continue;
    }
    if (n < 0) {
      FERRY_PLUGIN_LOG(FERRY_LOG_ERROR, "%s",
                       FiText("fi_cq_read", static_cast<int>(n), provider_).c_str());
      return;
    }
    for (ssize_t i = 0; i < n; ++i) {
      OpBase* op = FromContext(entries[i].op_context);
      if (op == nullptr) continue;
      switch (op->kind) {
        case OpKind::kRecv: {
          auto* b = static_cast<RxBuf*>(op);
          if (!TryInlineArrival(b, entries[i].len)) OnRecv(b, entries[i].len);
          break;
        }
        case OpKind::kSend:
          OnSendCompletion(static_cast<TxBuf*>(op));
          break;
        case OpKind::kRead:
          OnReadCompletion(static_cast<ReadOp*>(op), nullptr);
          break;
      }
    }
    if (static_cast<size_t>(n) < kCqBatch) return;
  }
}

void Context::DrainReadsBeforeClose() {
  // libfabric 1.17's ofi_rxm crashes in fi_close() of an endpoint whose RMA
  // reads are still outstanding, and the host may fini() a context with a
  // placement in flight (transport.h, fini). So the reads end first: they
  // complete within milliseconds from a live peer, and a dead one's fail;
  // the bound keeps fini() prompt whatever the provider does. Their
  // completions are queued events nobody returns; the destinations are the
  // host's until fini() returns.
  auto in_flight = [&] {
    uint64_t n = 0;
    for (const Conn* c : all_conns_) n += c->ReadsInFlight();
    return n;
  };
  const auto deadline = Conn::Clock::now() + std::chrono::milliseconds(500);
  while (in_flight() > 0 && Conn::Clock::now() < deadline) ReadCq();
}

void Context::HandleCqError() {
  fi_cq_err_entry err{};
  ssize_t rc = fi_cq_readerr(endpoint_->cq(), &err, 0);
  if (rc < 0) return;
  OpBase* op = FromContext(err.op_context);
  if (op == nullptr) {
    FERRY_PLUGIN_LOG(FERRY_LOG_WARN, "completion error without an operation: %s",
                     CqErrorText(endpoint_->cq(), err, provider_).c_str());
    return;
  }
  switch (op->kind) {
    case OpKind::kRecv: {
      auto* b = static_cast<RxBuf*>(op);
      b->posted = false;
      --rx_posted_;
      if (err.err != FI_ECANCELED) {
        FERRY_PLUGIN_LOG(FERRY_LOG_WARN, "a receive failed (buffer reposted): %s",
                         CqErrorText(endpoint_->cq(), err, provider_).c_str());
        PostRecv(b);
      }
      break;
    }
    case OpKind::kSend:
      OnSendError(static_cast<TxBuf*>(op), err);
      break;
    case OpKind::kRead:
      OnReadCompletion(static_cast<ReadOp*>(op), &err);
      break;
  }
}

uint32_t Context::Deliver(ferry_progress_args_t* args, uint32_t first) {
  return events_.Deliver(
      args, first,
      [](Conn* conn, ferry_event_t* ev) {
        ev->conn = reinterpret_cast<ferry_conn_t*>(conn);
        ev->conn_user_data = conn != nullptr ? conn->user_data : nullptr;
      },
      [this](Conn* conn, int32_t type) {
        if (type != FERRY_EV_CLOSED) return;
        // The handle is invalid for the host from now on; free it at the
        // start of the next progress(), after the host is done with this batch.
        auto it = std::find(all_conns_.begin(), all_conns_.end(), conn);
        if (it != all_conns_.end()) {
          *it = all_conns_.back();
          all_conns_.pop_back();
        }
        retired_.push_back(conn);
      });
}

void Context::FreeRetired() {
  for (Conn* c : retired_) delete c;
  retired_.clear();
}

}  // namespace ferry_fabric
