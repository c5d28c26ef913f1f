#include "context.h"

#include "address.h"
#include "connection.h"
#include "handles.h"
#include "listener.h"
#include "socket_util.h"
#include "wire.h"

#include "ferry_plugin/log.h"

#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>

namespace ferry_tcp {
namespace {

// Sockets are edge-triggered: see the wakeup note in context.h.
constexpr uint32_t kConnEvents = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
constexpr uint32_t kListenerEvents = EPOLLIN | EPOLLET;
constexpr int kEpollBatch = 64;
// Busy-poll mode reads up to this many open connections directly on every
// progress() (one recv each, no epoll_wait in front of it) and takes them out
// of epoll: while a socket is in an epoll set, every segment that arrives and
// every ACK that frees send space runs epoll's wakeup callback in the
// kernel (measured on loopback: ~0.15 us per 64-byte round trip, two
// callbacks, of the raw floor's ~7.5). Connections beyond these stay in epoll,
// which then runs on every progress(): one epoll_wait is cheaper than a recv
// per connection.
constexpr size_t kMaxSpinConns = 8;
// ...and calls epoll_wait only every kEpollEvery-th time, for accepts,
// connects and errors. When every connection is established, read directly
// and nothing listens, the direct recv()s see everything that matters (data,
// EOF, resets: recv reports them too; blocked sends are retried on each
// spin), so epoll_wait only collects the wakeup fd, and calling it every
// 16th time would still cost about one extra syscall per 64-byte round trip
// (a busy host makes ~20 progress() calls per round trip), each as costly
// as a recv(): then it waits for kEpollEveryEstablished calls.
constexpr uint32_t kEpollEvery = 16;
constexpr uint32_t kEpollEveryEstablished = 256;

// A host may write "::1" for listen_host; the address parser wants brackets.
std::string BracketHost(const std::string& host) {
  if (host.find(':') != std::string::npos && host[0] != '[') {
    return "[" + host + "]";
  }
  return host;
}

}  // namespace

Status Context::Create(uint32_t flags, const char* instance,
                       std::unique_ptr<Context>* out) {
  std::unique_ptr<Context> ctx(new Context(LoadConfig(flags)));
  Status st = ctx->Init(instance);
  if (st.ok()) *out = std::move(ctx);
  return st;
}

Context::Context(Config config) : config_(std::move(config)) {
  limits_ = LimitsOf(config_);
  description_ = config_.Describe();
  iov_scratch_.resize(IOV_MAX);
  drop_scratch_.reset(new char[kDropScratchSize]);
}

Status Context::Init(const char* instance) {
  instance_ = instance != nullptr ? instance : "";
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) {
    int e = errno;
    return Error(StatusForSetupErrno(e), "tcp: epoll_create1 failed: %s",
                 ErrnoText(e).c_str());
  }
  wakeup_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wakeup_fd_ < 0) {
    int e = errno;
    return Error(StatusForSetupErrno(e), "tcp: eventfd failed: %s", ErrnoText(e).c_str());
  }
  Status st;
  // Sleeping mode: edge-triggered, so each write puts the eventfd on the
  // epoll ready list once and the epoll_wait that reports it takes it off
  // again; the counter is never read back (see context.h). Busy-poll mode:
  // level-triggered and written once, so the fd stays readable for good.
  const uint32_t wakeup_events = config_.busy_poll ? EPOLLIN : EPOLLIN | EPOLLET;
  if (!Register(wakeup_fd_, wakeup_events, &wakeup_tag_, &st)) return st;
  if (config_.busy_poll) SignalWakeup();
  const wire::Hello hello = HelloOf(limits_);
  static_assert(sizeof hello_ >= wire::kHelloSize, "hello buffer too small");
  wire::EncodeHello(hello, hello_);
  FERRY_PLUGIN_LOG(FERRY_LOG_INFO, "context '%s': %s", instance_.c_str(),
                   description_.c_str());
  return Status();
}

Context::~Context() {
  for (Conn* c : retired_) delete c;
  for (Conn* c : conns_) delete c;
  for (Listener* l : listeners_) delete l;
  CloseFd(wakeup_fd_);
  CloseFd(epoll_fd_);
}

void Context::Query(ferry_context_info_t* info) const {
  ferry_context_info_t full{};
  // The smaller of both sizes: tells the host which fields were written.
  full.struct_size =
      static_cast<uint32_t>(std::min<size_t>(info->struct_size, sizeof full));
  full.max_header_size = config_.max_header_size;
  full.caps = FERRY_CAP_WAKEUP_FD | FERRY_CAP_DETECTS_PEER_DEATH | FERRY_CAP_ORDERED |
              FERRY_CAP_THREAD_SAFE | (config_.busy_poll ? FERRY_CAP_BUSY_POLL : 0);
  full.memory_kinds = FERRY_MEM_HOST;
  full.max_message_size = config_.max_message_size;
  full.max_inline_size = config_.max_inline_size;
  full.max_segments = config_.max_segments;
  full.wakeup_fd = epoll_fd_;
  full.priority = 10;
  full.domain = "";  // TCP reaches anything routable
  full.description = description_.c_str();
  std::memcpy(info, &full, std::min<size_t>(info->struct_size, sizeof full));
}

// --- progress ----------------------------------------------------------------

ferry_status_t Context::Progress(ferry_progress_args_t* args, Status* error) {
  args->num_events = 0;
  if (args->max_events > 0 &&
      (args->events == nullptr || args->event_stride < FERRY_EVENT_STRUCT_SIZE)) {
    return Report(error,
                  Error(FERRY_INVALID_ARGUMENT,
                        "tcp: progress() needs an events array and event_stride >= "
                        "%zu (got %p, %llu)",
                        FERRY_EVENT_STRUCT_SIZE, static_cast<void*>(args->events),
                        static_cast<unsigned long long>(args->event_stride)));
  }
  if (!retired_.empty()) FreeRetired();
  events_.ForgetDelivered();
  ++progress_epoch_;
  if (!corked_.empty()) FlushCorked();
  PollSockets(/*events_queued=*/!events_.Empty());
  if (!ready_.empty()) RunReady();
  uint32_t n = events_.Empty() ? 0 : Deliver(args);
  args->num_events = n;
  UpdateWakeup();
  return FERRY_OK;
}

void Context::PollSockets(bool events_queued) {
  if (config_.busy_poll) {
    for (Conn* c : spun_) c->PrimeForBusyPoll();
    if (open_.size() == spun_.size()) {  // else: the rest need epoll_wait now
      const uint32_t every = listeners_.empty() && conns_.size() == open_.size()
                                 ? kEpollEveryEstablished
                                 : kEpollEvery;
      if (!spun_.empty() && (poll_tick_++ % every) != 0) return;
    }
  } else if (events_queued && !skipped_epoll_) {
    // This call returns events already (queued by host calls since the last
    // one), so the host calls again before it sleeps; readiness we do not
    // collect now stays on the epoll ready list, and with it the wakeup fd
    // readable. Never twice in a row, so a host that posts before every
    // progress() still gets its sockets read.
    skipped_epoll_ = true;
    return;
  }
  skipped_epoll_ = false;
  epoll_event events[kEpollBatch];
  int n = epoll_wait(epoll_fd_, events, kEpollBatch, 0);
  if (n < 0) {
    if (errno != EINTR) {
      FERRY_PLUGIN_LOG(FERRY_LOG_ERROR, "epoll_wait failed: %s",
                       ErrnoText(errno).c_str());
    }
    return;
  }
  // Handlers never free a Pollable (frees wait for the next progress()), so
  // every pointer in this batch stays valid.
  for (int i = 0; i < n; ++i) {
    auto* target = static_cast<Pollable*>(events[i].data.ptr);
    if (target->kind() == Pollable::Kind::kWakeup) {
      // Edge-triggered (sleeping mode): this report took it off the ready
      // list, so the fd no longer signals until the next write.
      if (!config_.busy_poll) wakeup_signalled_ = false;
      continue;
    }
    target->OnEpoll(events[i].events);
  }
}

void Context::RunReady() {
  running_.swap(ready_);
  for (Conn* c : running_) {
    c->scheduled = false;
    c->Service();
  }
  running_.clear();
}

uint32_t Context::Deliver(ferry_progress_args_t* args) {
  return events_.Deliver(
      args, /*first=*/0,
      [](Conn* conn, ferry_event_t* ev) {
        ev->conn = conn != nullptr ? ToHandle(conn) : nullptr;
        ev->conn_user_data = conn != nullptr ? conn->user_data() : nullptr;
      },
      [this](Conn* conn, int32_t type) {
        if (type == FERRY_EV_ACCEPTED) {
          conn->OnAcceptDelivered();
        } else if (type == FERRY_EV_CLOSED) {
          // The handle is invalid for the host from now on; free it at the
          // start of the next progress(), after the host is done with this batch.
          conns_.erase(conn);
          retired_.push_back(conn);
        }
      });
}

void Context::UpdateWakeup() {
  if (wakeup_signalled_) return;  // busy-poll mode: always
  if (events_.Empty() && ready_.empty()) return;
  SignalWakeup();
}

void Context::SignalWakeup() {
  uint64_t one = 1;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (write(wakeup_fd_, &one, sizeof one) == sizeof one) {
      wakeup_signalled_ = true;
      return;
    }
    if (errno != EAGAIN) break;
    // The counter is never read in normal operation; after 2^64 - 2 writes
    // it is full and a write would block: reset it, then write again.
    uint64_t value;
    if (read(wakeup_fd_, &value, sizeof value) != sizeof value) break;
  }
  FERRY_PLUGIN_LOG(FERRY_LOG_ERROR, "cannot signal the wakeup eventfd: %s",
                   ErrnoText(errno).c_str());
}

void Context::FreeRetired() {
  for (Conn* c : retired_) {
    if (c->scheduled)
      ready_.erase(std::remove(ready_.begin(), ready_.end(), c), ready_.end());
    delete c;
  }
  retired_.clear();
}

// --- listeners and connections ----------------------------------------------

Status Context::Listen(const char* address, void* user_data, Listener** out) {
  std::string text = address != nullptr ? address : "";
  if (text.empty()) {
    text = BracketHost(config_.listen_host);
  } else if (text[0] == ':') {
    text = BracketHost(config_.listen_host) + text;
  }
  SocketAddress addr;
  Status st = ParseAddress(text, &addr);
  if (!st.ok()) return st;
  int fd = OpenStreamSocket(addr.family(), &st);
  if (fd < 0) return st;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (addr.family() == AF_INET6 && addr.IsWildcard()) {
    int zero = 0;  // "[::]" accepts IPv4 too
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  }
  if (bind(fd, addr.get(), addr.length) != 0 || listen(fd, SOMAXCONN) != 0) {
    int e = errno;
    CloseFd(fd);
    return Error(StatusForSetupErrno(e), "tcp: cannot listen on %s: %s",
                 addr.ToString().c_str(), ErrnoText(e).c_str());
  }
  SocketAddress bound;
  st = SocketName(fd, /*peer=*/false, &bound);
  if (!st.ok()) {
    CloseFd(fd);
    return st;
  }
  auto listener = std::make_unique<Listener>(
      this, fd, AdvertisedAddress(bound, config_.advertise_host), user_data);
  if (!Register(fd, kListenerEvents, listener.get(), &st)) return st;
  FERRY_PLUGIN_LOG(FERRY_LOG_INFO, "listening on %s (bound to %s)",
                   listener->address().c_str(), bound.ToString().c_str());
  listeners_.insert(listener.get());
  *out = listener.release();
  return Status();
}

void Context::CloseListener(Listener* listener) {
  listeners_.erase(listener);
  delete listener;
}

Status Context::Connect(const char* address, void* user_data, Conn** out) {
  std::string text = address != nullptr ? address : "";
  SocketAddress addr;
  Status st = ParseAddress(text, &addr);
  if (!st.ok()) return st;
  if (addr.port() == 0) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "tcp: cannot connect to '%s': no port (write host:port, as "
                 "listener_address() reports it)",
                 text.c_str());
  }
  int fd = OpenStreamSocket(addr.family(), &st);
  if (fd < 0) return st;
  ConfigureStreamSocket(fd, config_);
  int err = ::connect(fd, addr.get(), addr.length) == 0 ? 0 : errno;
  if (err == 0 || err == EINPROGRESS) ApplySocketBuffers(fd, config_, addr);
  auto conn = std::make_unique<Conn>(this, fd, Conn::State::kConnecting, addr.ToString(),
                                     user_data,
                                     /*accepted=*/false);
  bool in_flight = err == 0 || err == EINPROGRESS || err == EINTR;
  // Registered only now: an unconnected socket polls as EPOLLHUP. Once
  // connected (at once on loopback, or later) EPOLLOUT reports it.
  if (in_flight && !Register(fd, kConnEvents, conn.get(), &st)) return st;
  Conn* c = conn.release();
  conns_.insert(c);
  if (!in_flight) c->FailConnect(err);  // reported through FERRY_EV_CONNECTED
  *out = c;
  return Status();
}

void Context::Accept(int fd, void* listener_user_data) {
  ConfigureStreamSocket(fd, config_);
  SocketAddress peer;
  std::string peer_text = "<peer>";
  if (SocketName(fd, /*peer=*/true, &peer).ok()) {
    peer_text = peer.ToString();
    ApplySocketBuffers(fd, config_, peer);
  }
  auto conn =
      std::make_unique<Conn>(this, fd, Conn::State::kOpen, std::move(peer_text), nullptr,
                             /*accepted=*/true);
  Status st;
  if (!Register(fd, kConnEvents, conn.get(), &st)) {
    FERRY_PLUGIN_LOG(FERRY_LOG_WARN, "dropping an accepted connection: %s",
                     st.message.c_str());
    return;
  }
  Conn* c = conn.release();
  conns_.insert(c);
  AddOpen(c);
  Emit(FERRY_EV_ACCEPTED, c, listener_user_data);
  c->StartStream();
}

// --- helpers for connections -----------------------------------------------

void Context::EmitError(int32_t type, Conn* conn, void* user_data, ferry_status_t status,
                        std::string message) {
  QueuedEvent& e = Emit(type, conn, user_data);
  e.status = status;
  e.text = message.empty() ? std::string("tcp: operation failed") : std::move(message);
}

void Context::Schedule(Conn* conn) {
  if (conn->scheduled) return;
  conn->scheduled = true;
  ready_.push_back(conn);
}

void Context::Cork(Conn* conn) {
  if (conn->corked) return;
  conn->corked = true;
  corked_.push_back(conn);
}

void Context::Uncork(Conn* conn) {
  conn->corked = false;
  corked_.erase(std::remove(corked_.begin(), corked_.end(), conn), corked_.end());
}

void Context::FlushCorked() {
  // First, so that what waited is on the wire before this call reads.
  std::vector<Conn*> corked;
  corked.swap(corked_);
  for (Conn* c : corked) c->FlushCorked();
  corked.clear();
  if (corked_.empty()) corked_.swap(corked);  // keep the capacity
}

void Context::AddOpen(Conn* conn) {
  if (conn->open_index != SIZE_MAX) return;
  conn->open_index = open_.size();
  open_.push_back(conn);
  // Busy-poll mode: PrimeForBusyPoll() now reads, flushes and notices EOF
  // and resets for this connection on every spin, so epoll has nothing left
  // to tell about it. If the removal fails it simply stays in epoll.
  if (config_.busy_poll && spun_.size() < kMaxSpinConns &&
      epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, conn->fd(), nullptr) == 0) {
    conn->spun_index = spun_.size();
    spun_.push_back(conn);
  }
}

void Context::RemoveOpen(Conn* conn) {
  size_t i = conn->open_index;
  if (i == SIZE_MAX) return;
  open_[i] = open_.back();
  open_[i]->open_index = i;
  open_.pop_back();
  conn->open_index = SIZE_MAX;
  if ((i = conn->spun_index) != SIZE_MAX) {
    spun_[i] = spun_.back();
    spun_[i]->spun_index = i;
    spun_.pop_back();
    conn->spun_index = SIZE_MAX;
  }
}

void Context::RecallForClose(Conn* conn, const std::string& cancelled) {
  events_.ForEachQueued([&](QueuedEvent& e) {
    if (e.owner != conn) return;
    if (e.type == FERRY_EV_ARRIVAL) {
      e.suppressed = true;
    } else if (e.type == FERRY_EV_CONNECTED) {
      e.status = FERRY_CANCELLED;
      e.text = cancelled;
    }
  });
}

SendOp* Context::NewHelloOp() {
  SendOp* op = send_ops_.Get();
  op->internal = true;
  op->iov.push_back(iovec{hello_, wire::kHelloSize});
  return op;
}

bool Context::Register(int fd, uint32_t events, Pollable* target, Status* err) {
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = target;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) == 0) return true;
  int e = errno;
  *err = Error(StatusForSetupErrno(e), "tcp: epoll_ctl(ADD) failed: %s",
               ErrnoText(e).c_str());
  return false;
}

void Context::Unregister(int fd) {
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
}

}  // namespace ferry_tcp
