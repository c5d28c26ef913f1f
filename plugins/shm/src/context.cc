#include "context.h"

#include "clock.h"
#include "connection.h"
#include "setup_socket.h"

#include "ferry_plugin/init_args.h"
#include "ferry_plugin/log.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ferry_shm {
namespace {

// How often an active context looks at its sockets when nothing else makes
// it: bounds how late a new connection or a dead peer is noticed.
constexpr uint64_t kIoPollNs = 200 * 1000;

}  // namespace

Status Context::Create(const ferry_init_args_t* args, std::unique_ptr<Context>* out) {
  std::unique_ptr<Context> ctx(new Context());
  Status st = ctx->Init(args);
  if (!st.ok()) return st;
  *out = std::move(ctx);
  return Status();
}

Status Context::Init(const ferry_init_args_t* args) {
  const uint32_t flags = ferry_plugin::ReadInitArgs(args).flags;
  Status st = LoadConfig(flags, &config_);
  if (!st.ok()) return st;
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epfd_ < 0) return ErrnoError(FERRY_UNAVAILABLE, errno, "shm: epoll_create1");
  notify_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (notify_fd_ < 0) return ErrnoError(FERRY_UNAVAILABLE, errno, "shm: eventfd");
  Register(notify_fd_, &notify_poll_);
  // Not armed yet: keep the wakeup fd readable until the first idle
  // progress() arms the doorbells (context_wait.cc). In busy-poll mode that
  // never happens, so it stays readable for good: a host that waits on it
  // anyway spins, as busy-poll asks.
  SignalNotify();
  description_ = Format(
      "shared memory: memfd rings of %llu KiB, eventfd doorbell, large segments by %s, "
      "%s",
      (unsigned long long)(config_.ring_size >> 10),
      config_.cma_send ? "cross-memory attach (ring copy when not permitted)"
      : config_.cma ? "ring copy (received by cross-memory attach when the peer sends so)"
                    : "ring copy",
      config_.busy_poll
          ? "busy-poll"
          : Format("adaptive (spin %u us, then sleep)", config_.spin_us).c_str());
  return Status();
}

Context::~Context() {
  Adopt();
  for (Conn* c : conns_) delete c;
  for (Conn* c : retired_) delete c;
  for (Listener* l : listeners_) {
    if (l->fd >= 0) close(l->fd);
    unlink(l->path.c_str());
    delete l;
  }
  for (Listener* l : closed_listeners_) delete l;
  if (notify_fd_ >= 0) close(notify_fd_);
  if (epfd_ >= 0) close(epfd_);
}

void Context::Query(ferry_context_info_t* info) const {
  ferry_context_info_t mine;
  std::memset(&mine, 0, sizeof mine);
  mine.struct_size =
      static_cast<uint32_t>(std::min<size_t>(info->struct_size, sizeof mine));
  mine.max_header_size = config_.max_header_size;
  mine.caps = FERRY_CAP_DETECTS_PEER_DEATH | FERRY_CAP_ORDERED | FERRY_CAP_THREAD_SAFE |
              FERRY_CAP_WAKEUP_FD | (config_.busy_poll ? FERRY_CAP_BUSY_POLL : 0) |
              (config_.cma ? FERRY_CAP_ZERO_COPY_RECV : 0);
  mine.memory_kinds = FERRY_MEM_HOST;
  mine.max_message_size = config_.max_message_size;
  mine.max_inline_size = config_.inline_max;
  mine.max_segments = config_.max_segments;
  mine.wakeup_fd = epfd_;
  mine.priority = 50;
  mine.domain = config_.domain.c_str();
  mine.description = description_.c_str();
  std::memcpy(info, &mine, std::min<size_t>(info->struct_size, sizeof mine));
}

void Context::Register(int fd, Pollable* p) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.ptr = p;
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    FERRY_PLUGIN_LOG(FERRY_LOG_ERROR, "shm: epoll_ctl(ADD, %d): %s", fd,
                     std::strerror(errno));
  }
}

void Context::Unregister(int fd) {
  epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
}

// --- listeners and connections --------------------------------------------

Status Context::Connect(const char* address, void* user_data, Conn** out) {
  std::string path = address != nullptr ? address : "";
  Status st = CheckSocketPath(path);
  if (!st.ok()) return st;
  Conn* c = Conn::NewOutbound(this, path, user_data);
  {
    std::lock_guard<std::mutex> lock(mu_);
    incoming_.push_back(c);
    has_incoming_.store(true, std::memory_order_release);
  }
  Kick();
  *out = c;
  return Status();
}

void Context::Adopt() {
  std::lock_guard<std::mutex> lock(mu_);
  conns_.insert(conns_.end(), incoming_.begin(), incoming_.end());
  incoming_.clear();
  has_incoming_.store(false, std::memory_order_relaxed);
}

void Context::FreeRetired() {
  if (has_closed_listeners_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(mu_);
    for (Listener* l : closed_listeners_) delete l;
    closed_listeners_.clear();
    has_closed_listeners_.store(false, std::memory_order_relaxed);
  }
  // A host call may still be inside a connection whose CLOSED it has not
  // seen yet (a send racing with close): wait until it has left.
  if (sink_.has_backlog()) return;
  size_t keep = 0;
  for (Conn* c : retired_) {
    if (c->InCall()) {
      retired_[keep++] = c;
    } else {
      delete c;
    }
  }
  retired_.resize(keep);
}

// --- progress --------------------------------------------------------------

Status Context::Progress(ferry_progress_args_t* args) {
  if (args == nullptr ||
      args->struct_size < FERRY_STRUCT_SIZE(ferry_progress_args_t, num_events) ||
      (args->max_events > 0 &&
       (args->events == nullptr ||
        args->event_stride < FERRY_STRUCT_SIZE(ferry_event_t, conn_user_data)))) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "shm: progress() args are missing, or events/event_stride are invalid");
  }
  sink_.Begin(args);
  if (has_incoming_.load(std::memory_order_acquire)) Adopt();
  // Not while events wait in the backlog: they still read their
  // connection's user data.
  if ((!retired_.empty() && !sink_.has_backlog()) ||
      has_closed_listeners_.load(std::memory_order_acquire)) {
    FreeRetired();
  }
  bool worked = sink_.count() > 0;
  const bool armed = armed_.load(std::memory_order_relaxed);
  // Sockets (new connections, a peer's EOF) are checked on every call only
  // while something is being set up or the context is armed; otherwise at
  // most every kIoPollNs, so the epoll_wait syscall stays off the busy path.
  // The clock is read every 32nd call: under virtualisation a clock_gettime
  // costs tens of nanoseconds, a visible share of a spinning host's CPU if it
  // were read every few calls, and 32 calls of a spinning host take
  // microseconds. A host
  // that polls with back-off instead of waiting on the wakeup fd sees
  // sockets up to 32 of its polls late.
  bool io_due = armed || setups_.load(std::memory_order_relaxed) > 0;
  if (!io_due && (++tick_ & 31) == 0) {
    const uint64_t now = MonotonicNs();
    io_due = now - last_io_ns_ >= kIoPollNs;
  }
  if (io_due) {
    last_io_ns_ = MonotonicNs();
    worked |= PollIo();
  }
  worked |= PassOverConns();
  if (!config_.busy_poll) {
    if (armed) {
      if (worked) Disarm();
    } else if (!worked) {
      SpinThenArm();
    }
    // Events left for the next call: the host must come back.
    if (sink_.full() || sink_.has_backlog()) {
      if (armed_.load(std::memory_order_relaxed)) {
        Disarm();
      } else {
        SignalNotify();
      }
    }
  }
  sink_.End();
  return Status();
}

bool Context::PollIo() {
  epoll_event evs[64];
  int n = epoll_wait(epfd_, evs, 64, 0);
  bool worked = false;
  const bool armed = armed_.load(std::memory_order_relaxed);
  for (int i = 0; i < n; ++i) {
    auto* p = static_cast<Pollable*>(evs[i].data.ptr);
    switch (p->kind) {
      case Pollable::kNotify:
        // Signalled on purpose while not armed; while armed, a host call
        // kicked us.
        if (armed) {
          DrainNotify();
          worked = true;
        }
        break;
      case Pollable::kListener:
        Accept(static_cast<Listener*>(p->owner));
        worked = true;
        break;
      case Pollable::kConnSocket:
        static_cast<Conn*>(p->owner)->OnSocketEvent(&sink_);
        worked = true;
        break;
      case Pollable::kDoorbell:
        static_cast<Conn*>(p->owner)->DrainDoorbell();
        worked |= armed;
        break;
    }
  }
  return worked;
}

bool Context::PassOverConns() {
  bool worked = false;
  size_t keep = 0;
  for (size_t i = 0; i < conns_.size(); ++i) {
    Conn* c = conns_[i];
    switch (c->Progress(&sink_)) {
      case Conn::Step::kDead:
        retired_.push_back(c);
        worked = true;
        continue;
      case Conn::Step::kWorked:
        worked = true;
        break;
      case Conn::Step::kIdle:
        break;
    }
    conns_[keep++] = c;
  }
  conns_.resize(keep);
  return worked;
}

}  // namespace ferry_shm
