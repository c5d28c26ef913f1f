#include "context.h"

#include "address.h"
#include "fi_error.h"
#include "stale_shm.h"
#include "wire.h"

#include "ferry_plugin/log.h"

#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>

namespace ferry_fabric {
namespace {

std::string ReadFirstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string IpcNamespace() {
  char buf[128];
  ssize_t n = readlink("/proc/self/ns/ipc", buf, sizeof buf - 1);
  if (n <= 0) return "?";
  buf[n] = '\0';
  return buf;
}

bool StartsWith(const std::string& s, const char* prefix) {
  return s.compare(0, std::strlen(prefix), prefix) == 0;
}

// Routing preference: hardware fabrics beat the shm and tcp plugins; the
// socket-based providers lose to ferry's own tcp plugin (10), which is
// faster than tcp;ofi_rxm for the same wire.
int32_t DefaultPriority(const std::string& provider) {
  if (StartsWith(provider, "efa") || StartsWith(provider, "verbs") ||
      StartsWith(provider, "psm") || StartsWith(provider, "cxi") ||
      StartsWith(provider, "opx") || StartsWith(provider, "ucx")) {
    return 60;
  }
  if (StartsWith(provider, "shm")) return 40;
  return 5;
}

std::string Bytes(uint64_t n) {
  if (n >= (uint64_t{1} << 30) && n % (uint64_t{1} << 30) == 0) {
    return std::to_string(n >> 30) + " GiB";
  }
  if (n >= (1u << 20) && n % (1u << 20) == 0) return std::to_string(n >> 20) + " MiB";
  if (n >= 1024 && n % 1024 == 0) return std::to_string(n >> 10) + " KiB";
  return std::to_string(n) + " B";
}

}  // namespace

Status Context::Create(uint32_t flags, const char* instance,
                       std::unique_ptr<Context>* out) {
  std::unique_ptr<Context> ctx(new Context(LoadConfig(flags)));
  Status st = ctx->Init(instance);
  if (st.ok()) *out = std::move(ctx);
  return st;
}

Context::Context(Config config) : config_(std::move(config)) {}

Status Context::Init(const char* instance) {
  instance_ = instance != nullptr ? instance : "";
  Status st = SelectProvider(config_, &selection_);
  if (!st.ok()) return st;
  const fi_info* info = selection_.info.get();
  provider_ = info->fabric_attr->prov_name ? info->fabric_attr->prov_name : "?";
  rma_ = selection_.rma;
  hmem_ = selection_.hmem;

  if (config_.cloexec_sweep) fd_sweeper_.Baseline();
  RemoveStaleShmRegions();  // before any endpoint of this pid opens one
  endpoint_ = std::make_unique<Endpoint>();
  st = endpoint_->Open(info, /*want_wait_fd=*/!config_.busy_poll);
  // FI_HMEM says the provider knows device memory; whether this libfabric
  // can register CUDA memory (built with CUDA, driver usable) it only says
  // when asked. Seen on a GPU host whose distribution libfabric has no CUDA
  // support: a CUDA segment then went out as if it were host memory and its
  // transfer never completed.
  if (st.ok() && hmem_)
    no_cuda_ = CudaRegistrationFailure(endpoint_->domain(), provider_);
  if (!no_cuda_.empty() && config_.hmem == Tristate::kAuto) {
    st = Error(FERRY_UNAVAILABLE, "%s", no_cuda_.c_str());
  }
  if (!st.ok() && hmem_ && config_.hmem == Tristate::kAuto) {
    // hmem=auto found a GPU driver and a provider entry with FI_HMEM, but
    // the provider could not open it (no usable CUDA runtime, say) or
    // cannot register CUDA memory: host memory only, rather than no
    // transport at all (or FI_HMEM's cost for nothing).
    FERRY_PLUGIN_LOG(FERRY_LOG_WARN,
                     "provider %s with FI_HMEM failed (%s); retrying without device "
                     "memory support (set FERRY_FABRIC_HMEM=off to skip this)",
                     provider_.c_str(), st.message.c_str());
    const std::string why = st.message;
    Config host_only = config_;
    host_only.hmem = Tristate::kOff;
    endpoint_ = std::make_unique<Endpoint>();
    st = SelectProvider(host_only, &selection_);
    if (!st.ok()) return st;
    selection_.hmem_declined = why;
    info = selection_.info.get();
    rma_ = selection_.rma;
    hmem_ = selection_.hmem;
    no_cuda_.clear();
    st = endpoint_->Open(info, /*want_wait_fd=*/!config_.busy_poll);
  }
  if (!st.ok()) return st;
  if (hmem_ && !CudaMemory()) {
    FERRY_PLUGIN_LOG(
        FERRY_LOG_WARN,
        "hmem=on: %s; CUDA segments will be refused (set FERRY_FABRIC_HMEM=off "
        "to keep fi_inject, or use a libfabric built with CUDA)",
        no_cuda_.c_str());
  }

  // Limits: an eager frame must fit the provider's message size, and a
  // header plus a full segment table plus RMA descriptors must fit a frame.
  const uint64_t max_msg = info->ep_attr->max_msg_size;
  eager_size_ = static_cast<uint32_t>(std::min<uint64_t>(config_.eager_size, max_msg));
  if (eager_size_ < wire::kMinEagerSize) {
    return Error(FERRY_UNAVAILABLE,
                 "fabric: provider %s carries messages of at most %llu bytes; "
                 "the plugin needs %zu",
                 provider_.c_str(), static_cast<unsigned long long>(max_msg),
                 wire::kMinEagerSize);
  }
  const size_t table =
      (sizeof(wire::SegEntry) + sizeof(wire::RemoteEntry)) * config_.max_segments;
  max_header_ = static_cast<uint32_t>(
      std::min<size_t>(config_.max_header_size, eager_size_ - sizeof(wire::Msg) - table));
  max_inline_ = std::min<uint32_t>(config_.max_inline_size, eager_size_ / 2);
  inject_size_ = config_.inject ? info->tx_attr->inject_size : 0;
  inject_scratch_.resize(std::max<size_t>(inject_size_, 1));
  max_read_ = std::min<uint64_t>(config_.rma_chunk_size, max_msg);

  registrar_ = std::make_unique<Registrar>(endpoint_->domain(), endpoint_->ep(),
                                           info->domain_attr->mr_mode, rma_, hmem_,
                                           config_.force_mr_local, provider_);
  peers_ = std::make_unique<PeerTable>(endpoint_.get());

  st = rx_pool_.Init(registrar_.get(), config_.rx_buffers, eager_size_);
  if (!st.ok()) return st;
  st = tx_pool_.Init(registrar_.get(), config_.tx_buffers, eager_size_);
  if (!st.ok()) return st;
  tx_reserve_ = std::max<uint32_t>(8, config_.tx_buffers / 16);
  rx_window_ = std::min(config_.rx_posted, rx_pool_.count());
  rx_idle_.reserve(rx_pool_.count());
  for (uint32_t i = rx_pool_.count(); i > 0; --i) rx_idle_.push_back(rx_pool_.at(i - 1));
  RepostRx();

  if (endpoint_->cq_wait_fd() >= 0) {
    st = wakeup_.Open(endpoint_->cq_wait_fd());
    if (!st.ok()) return st;
    has_wakeup_ = true;
  }
  no_wakeup_reason_ = endpoint_->no_wait_reason();
  alive_ = LocalEndpoints::Register(provider_, endpoint_->name());

  if (!config_.domain_override.empty()) {
    domain_ = config_.domain_override;
  } else {
    domain_ = "fabric:" + provider_ + ":" +
              (info->fabric_attr->name ? info->fabric_attr->name : "?");
    if (StartsWith(provider_, "shm")) {
      // Shared memory reaches only this kernel and IPC namespace.
      domain_ += ";host=" + ReadFirstLine("/proc/sys/kernel/random/boot_id") +
                 ";ipc=" + IpcNamespace();
    }
  }
  description_ = Describe();
  if (config_.cloexec_sweep) fd_sweeper_.Sweep();
  FERRY_PLUGIN_LOG(FERRY_LOG_INFO, "context '%s': %s", instance_.c_str(),
                   description_.c_str());
  return Status();
}

std::string Context::Describe() const {
  const fi_info* info = selection_.info.get();
  const uint32_t v = fi_version();
  std::string d =
      Format("libfabric %u.%u provider %s, fabric %s, domain %s; RDM endpoint; ",
             FI_MAJOR(v), FI_MINOR(v), provider_.c_str(),
             info->fabric_attr->name ? info->fabric_attr->name : "?",
             info->domain_attr->name ? info->domain_attr->name : "?");
  if (rma_) {
    d += "large segments by RMA read (rendezvous, " + Bytes(max_read_) + " per read); ";
  } else {
    d += std::string("large segments as chunked messages (") +
         (config_.rma == Tristate::kOff ? "rma=off" : "provider has no FI_RMA") + "); ";
  }
  d += "eager frames " + Bytes(eager_size_) + ", inline segments up to " +
       Bytes(max_inline_) + ", inject " + Bytes(inject_size_) + "; ";
  d += "receive buffers " + std::to_string(rx_window_) + " posted of " +
       std::to_string(rx_pool_.count()) + "; ";
  d += "mr_mode " + MrModeText(registrar_->mr_mode()) +
       (registrar_->force_local() ? " (+FI_MR_LOCAL forced)" : "") + "; ";
  if (CudaMemory()) {
    d += "FI_HMEM device memory: yes (CUDA); ";
  } else if (hmem_) {
    d += "FI_HMEM device memory: no (FI_HMEM opened, hmem=on, but " + no_cuda_ + "); ";
  } else if (!selection_.hmem_declined.empty()) {
    d += "FI_HMEM device memory: no (host memory only; hmem=auto declined it: " +
         selection_.hmem_declined + "); ";
  } else {
    d += "FI_HMEM device memory: no (host memory only); ";
  }
  d += has_wakeup_ ? "wakeup fd: CQ FI_WAIT_FD + fi_trywait"
                   : "no wakeup fd, polled: " + no_wakeup_reason_;
  if (config_.busy_poll) d += "; busy-poll";
  return d;
}

Context::~Context() {
  if (endpoint_ == nullptr) return;  // init failed before any resource
  LocalEndpoints::Unregister(provider_, endpoint_->name(), alive_);
  DrainReadsBeforeClose();
  // Posted receives, sends and reads are cancelled with the endpoint; only
  // then may the memory and registrations they used go.
  endpoint_->CloseEndpoint();
  for (Conn* c : all_conns_) delete c;  // pooled objects go with the pools
  for (Conn* c : retired_) delete c;
  for (auto& [id, l] : listeners_) delete l;
  for (HostMr* h : host_mrs_) registrar_->ReleaseHost(h);
}

void Context::Query(ferry_context_info_t* info) const {
  ferry_context_info_t full{};
  // The smaller of both sizes: the caller learns how much was written.
  full.struct_size =
      static_cast<uint32_t>(std::min<size_t>(info->struct_size, sizeof full));
  full.max_header_size = max_header_;
  full.caps = FERRY_CAP_ORDERED | FERRY_CAP_THREAD_SAFE | FERRY_CAP_REGISTRATION |
              (has_wakeup_ ? FERRY_CAP_WAKEUP_FD : 0) |
              (config_.busy_poll ? FERRY_CAP_BUSY_POLL : 0) |
              (rma_ ? FERRY_CAP_ZERO_COPY_RECV : 0);
  full.memory_kinds = FERRY_MEM_HOST | (CudaMemory() && rma_ ? FERRY_MEM_CUDA : 0);
  full.max_message_size = config_.max_message_size;
  full.max_inline_size = max_inline_;
  full.max_segments = config_.max_segments;
  full.wakeup_fd = has_wakeup_ ? wakeup_.fd() : -1;
  full.priority = config_.priority >= 0 ? config_.priority : DefaultPriority(provider_);
  full.domain = domain_.c_str();
  full.description = description_.c_str();
  std::memcpy(info, &full, std::min<size_t>(info->struct_size, sizeof full));
}

// --- events -------------------------------------------------------------------

void Context::EmitError(int32_t type, Conn* conn, void* user_data, ferry_status_t status,
                        std::string message) {
  QueuedEvent& e = Emit(type, conn, user_data);
  e.status = status;
  e.text = message.empty() ? std::string("fabric: operation failed") : std::move(message);
}

bool Context::HasWork() const {
  // Receive buffers to post are work only once fewer than half the window
  // is posted: before that they wait for the next progress() without waking
  // a sleeping host.
  return !events_.Empty() || resend_head_ != nullptr || !tx_retry_.empty() ||
         reads_head_ != nullptr || !streaming_.empty() || RxLow() || sweep_pending_;
}

void Context::SettleAfterHostCall() {
  if (sweep_pending_ && config_.cloexec_sweep) fd_sweeper_.Sweep();
  sweep_pending_ = false;
  // Only ever signals here: clearing needs fi_trywait, which progress() does.
  if (has_wakeup_ && HasWork()) {
    wakeup_.Settle(true, endpoint_->fabric(), endpoint_->cq());
  }
}

// --- listeners and connections ------------------------------------------------

Status Context::Listen(const char* address, void* user_data, Listener** out) {
  // Every listener of a context shares the context's endpoint: the address
  // (which the endpoint fixed at init) cannot be chosen. A non-empty request
  // is accepted and logged, so configuration written for tcp still works.
  if (address != nullptr && address[0] != '\0') {
    FERRY_PLUGIN_LOG(FERRY_LOG_DEBUG,
                     "listen('%s'): fabric listeners use the context's endpoint "
                     "address; the requested address is ignored",
                     address);
  }
  auto* l = new Listener();
  l->ctx = this;
  l->id = next_listener_id_++;
  l->user_data = user_data;
  l->address = ListenerAddress(provider_, endpoint_->name(), l->id);
  listeners_[l->id] = l;
  *out = l;
  return Status();
}

void Context::CloseListener(Listener* l) {
  listeners_.erase(l->id);
  l->magic = 0;
  delete l;
}

Status Context::Connect(const char* address, void* user_data, Conn** out) {
  ParsedAddress parsed;
  Status st = ParseListenerAddress(address, provider_, &parsed);
  if (!st.ok()) return st;
  Peer* peer = nullptr;
  st = peers_->Get(parsed.name, &peer);
  if (!st.ok()) return st;
  sweep_pending_ = true;  // the provider may have opened a socket
  auto* c = new Conn(this, peer, /*is_accepted=*/false);
  c->id = conns_.Insert(c);
  all_conns_.push_back(c);
  c->user_data = user_data;
  c->connect_cookie = user_data;
  c->peer_address = address;
  *out = c;
  ArmDeadline(c, config_.connect_timeout_ms);
  if (peer->Unreachable()) {
    FailConnect(c, FERRY_UNAVAILABLE,
                "fabric: connection refused: the endpoint at " + std::string(address) +
                    " has been closed");
    return Status();
  }
  wire::Connect f{};
  f.head = wire::MakeHead(wire::kConnect, 0);
  f.listener_id = parsed.listener_id;
  f.src_conn = c->id;
  f.limits = OwnLimits();
  f.name_len = static_cast<uint32_t>(endpoint_->name().size());
  SendControl(peer, c->id, &f, sizeof f, endpoint_->name().data(),
              endpoint_->name().size());
  return Status();
}

Status Context::Reg(const ferry_reg_args_t& args, HostMr** out) {
  Status st = registrar_->RegisterHost(args, out);
  if (st.ok()) host_mrs_.push_back(*out);
  return st;
}

void Context::Dereg(HostMr* mr) {
  auto it = std::find(host_mrs_.begin(), host_mrs_.end(), mr);
  if (it == host_mrs_.end()) {
    FERRY_PLUGIN_LOG(FERRY_LOG_ERROR,
                     "dereg() of a registration this context does not own");
    return;
  }
  host_mrs_.erase(it);
  registrar_->ReleaseHost(mr);
}

wire::Limits Context::OwnLimits() const {
  wire::Limits l{};
  l.eager_size = eager_size_;
  l.max_header = max_header_;
  l.max_segments = config_.max_segments;
  l.max_inline = max_inline_;
  l.flags = rma_ ? wire::kLimitRma : 0;
  return l;
}

}  // namespace ferry_fabric
