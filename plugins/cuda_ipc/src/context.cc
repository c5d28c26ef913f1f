#include "context.h"

#include "address.h"

#include "ferry_plugin/log.h"
#include "ferry_plugin/params.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ferry_cuda_ipc {

namespace {

// The process at the other end of a Unix socket (in our pid namespace), or 0.
pid_t PeerPid(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 ? cred.pid : 0;
}

}  // namespace

Listener::~Listener() {
  if (fd_ >= 0) close(fd_);
  if (!path_.empty()) unlink(path_.c_str());
}

Status Context::Create(uint32_t flags, const char* instance,
                       std::unique_ptr<Context>* out) {
  (void)flags;  // no busy-poll mode: the host sleeps on the wakeup fd
  std::unique_ptr<Context> ctx(new Context());
  Config& c = ctx->config_;
  c.host_only = ferry_plugin::IntParam("host_only", 0, 0, 1) != 0;
  c.handle_cache =
      static_cast<uint32_t>(ferry_plugin::IntParam("handle_cache", 256, 1, 65536));
  c.abandon_ms =
      static_cast<uint32_t>(ferry_plugin::IntParam("abandon_ms", 10000, 1, 3600000));
  c.max_host_bytes =
      ferry_plugin::IntParam("max_host_bytes", c.max_host_bytes, 4096, uint64_t{1} << 32);
  const std::string wait = ferry_plugin::StringParam("producer_wait", "host");
  if (wait != "host" && wait != "gpu") {
    return Error(FERRY_INVALID_ARGUMENT,
                 "cuda_ipc: producer_wait is '%s'; it takes 'host' or 'gpu' "
                 "(FERRY_CUDA_IPC_PRODUCER_WAIT)",
                 wait.c_str());
  }
  c.producer_wait_gpu = wait == "gpu";
  c.domain = ferry_plugin::StringParam("domain_override", "");
  if (c.domain.empty()) c.domain = LocalDomain();
  if (c.host_only) {
    c.max_message = c.max_host_bytes;
  } else {
    Status st = Gpu::Open(&ctx->gpu_);
    if (!st.ok()) return st;
  }
  ctx->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (ctx->epoll_fd_ < 0) {
    return Error(FERRY_RESOURCE_EXHAUSTED, "cuda_ipc: %s",
                 ErrnoText(errno, "epoll_create1").c_str());
  }
  ctx->wakeup_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (ctx->wakeup_fd_ < 0) {
    return Error(FERRY_RESOURCE_EXHAUSTED, "cuda_ipc: %s",
                 ErrnoText(errno, "eventfd").c_str());
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;
  if (epoll_ctl(ctx->epoll_fd_, EPOLL_CTL_ADD, ctx->wakeup_fd_, &ev) != 0) {
    return Error(FERRY_INTERNAL, "cuda_ipc: %s", ErrnoText(errno, "epoll_ctl").c_str());
  }
  if (c.host_only) {
    ctx->description_ =
        "Unix socket, HOST-ONLY test mode (FERRY_CUDA_IPC_HOST_ONLY): host memory only";
  } else {
    const ferry_cuda::Driver& cu = ctx->gpu_->cu();
    char name[128] = "?";
    CUdevice d0 = 0;
    if (cu.cuDeviceGet(&d0, 0) == CUDA_SUCCESS) cu.cuDeviceGetName(name, sizeof name, d0);
    ctx->description_ = Format(
        "legacy CUDA IPC handles + interprocess events, Unix socket control; driver "
        "%d.%d, %d device(s) (%s%s)",
        cu.version / 1000, (cu.version % 1000) / 10, cu.devices, name,
        cu.devices > 1 ? ", ..." : "");
  }
  if (instance != nullptr && instance[0] != '\0') {
    FERRY_PLUGIN_LOG(FERRY_LOG_DEBUG, "context '%s': %s", instance,
                     ctx->description_.c_str());
  }
  *out = std::move(ctx);
  return Status();
}

Context::~Context() {
  // Connections first: they hold CUDA state (events, mappings) of gpu_.
  for (Conn* c : conns_) delete c;
  conns_.clear();
  for (Listener* l : listeners_) delete l;
  listeners_.clear();
  if (wakeup_fd_ >= 0) close(wakeup_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
  gpu_.reset();
}

void Context::Query(ferry_context_info_t* info) const {
  ferry_context_info_t mine{};
  mine.struct_size = static_cast<uint32_t>(sizeof mine);
  mine.max_header_size = config_.max_header;
  mine.caps = FERRY_CAP_WAKEUP_FD | FERRY_CAP_DETECTS_PEER_DEATH | FERRY_CAP_ORDERED;
  if (!config_.host_only) mine.caps |= FERRY_CAP_ZERO_COPY_RECV;
  mine.memory_kinds = FERRY_MEM_HOST | (config_.host_only ? 0 : FERRY_MEM_CUDA);
  mine.max_message_size = config_.max_message;
  mine.max_inline_size = config_.max_host_bytes;  // every host segment is inline
  mine.max_segments = config_.max_segments;
  mine.wakeup_fd = epoll_fd_;
  // Below tcp (10) and shm (50): "auto" never picks it for host messages;
  // the core routes device messages to it by memory kind.
  mine.priority = 5;
  mine.domain = config_.domain.c_str();
  mine.description = description_.c_str();
  const uint32_t size = std::min<uint32_t>(info->struct_size, mine.struct_size);
  std::memcpy(info, &mine, size);
  info->struct_size = size;
}

void Context::EmitError(int32_t type, Conn* conn, void* user_data, ferry_status_t status,
                        const std::string& message) {
  QueuedEvent& e = Emit(type, conn, user_data);
  e.status = status;
  e.text = message.empty() ? "cuda_ipc: operation failed" : message;
}

Status Context::SetEpoll(int fd, uint32_t want, uint32_t* mask, Pollable* tag) {
  if (fd < 0 || want == *mask) return Status();
  epoll_event ev{};
  ev.events = want;
  ev.data.ptr = tag;
  const int op = want == 0 ? EPOLL_CTL_DEL : *mask == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
  if (epoll_ctl(epoll_fd_, op, fd, &ev) != 0) {
    return Error(FERRY_INTERNAL, "cuda_ipc: %s", ErrnoText(errno, "epoll_ctl").c_str());
  }
  *mask = want;
  return Status();
}

void Context::Forget(Conn* conn) {
  kicked_.erase(std::remove(kicked_.begin(), kicked_.end(), conn), kicked_.end());
}

Status Context::Listen(const char* address, void* user_data, Listener** out) {
  const std::string want =
      (address == nullptr || address[0] == '\0') ? NewListenName() : address;
  UnixAddress a;
  Status st = ParseAddress(want, &a);
  if (!st.ok()) return st;
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return Error(FERRY_RESOURCE_EXHAUSTED, "cuda_ipc: %s",
                 ErrnoText(errno, "socket").c_str());
  }
  if (bind(fd, reinterpret_cast<const sockaddr*>(&a.sa), a.len) != 0 ||
      listen(fd, SOMAXCONN) != 0) {
    const int err = errno;
    close(fd);
    return Error(err == EADDRINUSE ? FERRY_ALREADY_EXISTS : FERRY_UNAVAILABLE,
                 "cuda_ipc: %s", ErrnoText(err, "cannot listen at " + a.text).c_str());
  }
  auto* l = new Listener(this, fd, a.text, a.path, user_data);
  uint32_t mask = 0;
  st = SetEpoll(fd, EPOLLIN, &mask, l);
  if (!st.ok()) {
    delete l;
    return st;
  }
  listeners_.insert(l);
  *out = l;
  return Status();
}

void Context::CloseListener(Listener* l) {
  if (listeners_.erase(l) == 0) return;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, l->fd(), nullptr);
  delete l;
}

void Context::AcceptAll(Listener* l) {
  for (;;) {
    const int fd = accept4(l->fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        FERRY_PLUGIN_LOG(FERRY_LOG_WARN, "%s",
                         ErrnoText(errno, "accept on " + l->address()).c_str());
      }
      return;
    }
    const pid_t pid = PeerPid(fd);
    std::string peer = l->address() + " (accepted";
    if (pid > 0) peer += Format(", peer pid %d", static_cast<int>(pid));
    peer += ")";
    auto* c = new Conn(this, fd, peer, pid == getpid());
    conns_.insert(c);
    Emit(FERRY_EV_ACCEPTED, c, l->user_data());
  }
}

Status Context::Connect(const char* address, void* user_data, Conn** out) {
  UnixAddress a;
  Status st = ParseAddress(address != nullptr ? address : "", &a);
  if (!st.ok()) return st;
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return Error(FERRY_RESOURCE_EXHAUSTED, "cuda_ipc: %s",
                 ErrnoText(errno, "socket").c_str());
  }
  // A Unix socket connects at once or fails at once (EAGAIN: the listener's
  // backlog is full). Either way the answer is queued, never given inline.
  const bool connected =
      ::connect(fd, reinterpret_cast<const sockaddr*>(&a.sa), a.len) == 0;
  const int err = errno;
  auto* c = new Conn(this, fd, a.text, connected && PeerPid(fd) == getpid());
  c->set_user_data(user_data);
  conns_.insert(c);
  if (connected) {
    Emit(FERRY_EV_CONNECTED, c, user_data);
  } else {
    const std::string why =
        err == EAGAIN
            ? "cuda_ipc: cannot connect to " + a.text + ": the listener's backlog is full"
            : "cuda_ipc: " + ErrnoText(err, "cannot connect to " + a.text);
    c->FailConnect(FERRY_UNAVAILABLE, why);
    EmitError(FERRY_EV_CONNECTED, c, user_data, FERRY_UNAVAILABLE, why);
  }
  *out = c;
  return Status();
}

void Context::UpdateWakeup() {
  bool copies = false;
  if (!config_.host_only) {
    for (Conn* c : conns_) {
      copies = copies || c->copies_pending() || c->waiting_on_producer();
    }
  }
  const bool want = !events_.Empty() || !kicked_.empty() || copies;
  if (want && !signalled_) {
    const uint64_t one = 1;
    if (write(wakeup_fd_, &one, sizeof one) == static_cast<ssize_t>(sizeof one)) {
      signalled_ = true;
    }
  } else if (!want && signalled_) {
    uint64_t v = 0;
    if (read(wakeup_fd_, &v, sizeof v) == static_cast<ssize_t>(sizeof v) ||
        errno == EAGAIN) {
      signalled_ = false;
    }
  }
}

void Context::Delivered(Conn* conn, int32_t type) {
  if (conn == nullptr) return;
  if (type == FERRY_EV_CONNECTED || type == FERRY_EV_ACCEPTED) {
    conn->Announced();
  } else if (type == FERRY_EV_CLOSED) {
    // The handle is invalid from here on.
    conns_.erase(conn);
    Forget(conn);
    delete conn;
  }
}

ferry_status_t Context::Progress(ferry_progress_args_t* args, Status* error) {
  events_.ForgetDelivered();
  args->num_events = 0;
  if (args->max_events > 0 &&
      (args->events == nullptr ||
       args->event_stride < FERRY_STRUCT_SIZE(ferry_event_t, type))) {
    return Report(error, Error(FERRY_INVALID_ARGUMENT,
                               "cuda_ipc: progress() needs an event array and stride"));
  }
  epoll_event ready[64];
  const int n = epoll_wait(epoll_fd_, ready, 64, 0);
  for (int i = 0; i < n; ++i) {
    auto* p = static_cast<Pollable*>(ready[i].data.ptr);
    if (p == nullptr) continue;  // the eventfd
    if (p->kind == Pollable::Kind::kListener) {
      auto* l = static_cast<Listener*>(p);
      if (listeners_.count(l) != 0) AcceptAll(l);
    } else {
      auto* c = static_cast<Conn*>(p);
      if (conns_.count(c) != 0) c->OnEpoll(ready[i].events);
    }
  }
  servicing_.swap(kicked_);
  for (Conn* c : servicing_) {
    if (conns_.count(c) != 0) c->Service();
  }
  servicing_.clear();
  if (!config_.host_only) {
    for (Conn* c : conns_) {
      if (c->copies_pending()) c->PollCopies();
      if (c->waiting_on_producer()) c->Flush();
    }
  }
  if (args->max_events > 0) {
    args->num_events = events_.Deliver(
        args, 0,
        [](Conn* c, ferry_event_t* ev) {
          ev->conn = reinterpret_cast<ferry_conn_t*>(c);
          ev->conn_user_data = c != nullptr ? c->user_data() : nullptr;
        },
        [this](Conn* c, int32_t type) { Delivered(c, type); });
  }
  UpdateWakeup();
  return FERRY_OK;
}

}  // namespace ferry_cuda_ipc
