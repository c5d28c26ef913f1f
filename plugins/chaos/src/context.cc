#include "context.h"

#include "ferry_plugin/init_args.h"
#include "ferry_plugin/log.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

namespace ferry_chaos {
namespace {

// Inner progress() calls per chaos progress(): drain until the inner
// context returns nothing (so its own wakeup fd goes quiet), but bounded so
// a flood cannot keep one progress() call from returning.
constexpr int kMaxInnerRounds = 64;
constexpr uint32_t kInnerBatch = 64;

// A non-NULL pointer for zero-length inline segments and empty headers.
const unsigned char kEmpty[1] = {0};

// The caps chaos passes through from the inner context when it has them.
// ORDERED (chaos may reorder; never claimed, see README.md) and
// ZERO_COPY_RECV (chaos always copies) are not among them, nor
// DEVICE_REG_REQUIRED (chaos moves host memory only) or unknown future bits.
constexpr uint64_t kPassedCaps =
    FERRY_CAP_DETECTS_PEER_DEATH | FERRY_CAP_REGISTRATION | FERRY_CAP_BUSY_POLL;

std::string InnerMessage(const ferry_event_t& ev) {
  if (ev.message != nullptr && ev.message[0] != '\0') return ev.message;
  if (ev.status == FERRY_OK) return std::string();
  return Format("chaos: the inner transport reported status %d without a message",
                static_cast<int>(ev.status));
}

bool HostDevice(const ferry_device_t& d) {
  return d.type == 0 || d.type == FERRY_DEVICE_CPU || d.type == FERRY_DEVICE_CUDA_HOST ||
         d.type == FERRY_DEVICE_CUDA_MANAGED;
}

void CloseFd(int* fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

}  // namespace

// --- construction ------------------------------------------------------------

Context::InnerErr::InnerErr() {
  data[0] = '\0';
  buf.struct_size = FERRY_ERROR_BUF_STRUCT_SIZE;
  buf.reserved = 0;
  buf.data = data;
  buf.capacity = sizeof data;
}

Status Context::InnerErr::ToStatus(ferry_status_t code, const char* call) const {
  if (data[0] != '\0') return Status(code, data);
  return Error(code,
               "chaos: the inner transport's %s() failed with status %d "
               "and no message",
               call, static_cast<int>(code));
}

Status Context::Create(const ferry_init_args_t* args, std::unique_ptr<Context>* out) {
  Config config;
  Status st = LoadConfig(&config);
  if (!st.ok()) return st;
  std::unique_ptr<Context> ctx(new Context(std::move(config)));
  st = ctx->Init(args);
  if (st.ok()) *out = std::move(ctx);
  return st;
}

Context::Context(Config config)
    : config_(std::move(config)), release_rng_(ContextSeed(config_.seed)) {
  inner_events_.resize(kInnerBatch);
}

uint64_t Context::NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull +
         static_cast<uint64_t>(ts.tv_nsec);
}

Status Context::Init(const ferry_init_args_t* args) {
  const ferry_plugin::InitArgs in = ferry_plugin::ReadInitArgs(args);
  const uint32_t flags = in.flags;
  if (in.instance != nullptr) instance_ = in.instance;
  Status st = LoadInner(config_.inner, &inner_);
  if (!st.ok()) return st;

  // The inner context gets the same flags (busy-poll) and label; its host
  // services are the host's own (passed at its negotiation).
  ferry_init_args_t ia{};
  ia.struct_size = FERRY_INIT_ARGS_STRUCT_SIZE;
  ia.flags = flags;
  ia.instance = instance_.c_str();
  ia.ext = nullptr;
  InnerErr e;
  ferry_status_t rc = FERRY_INTERNAL;
  try {
    rc = inner_->vt->init(&ia, &inner_ctx_, &e.buf);
  } catch (...) {
    return Error(FERRY_INTERNAL, "chaos: init() of the inner transport %s threw",
                 inner_->name.c_str());
  }
  if (rc != FERRY_OK) {
    inner_ctx_ = nullptr;
    return Error(rc, "chaos: the inner transport %s cannot start: %s",
                 inner_->name.c_str(), e.ToStatus(rc, "init").message.c_str());
  }

  ferry_context_info_t ii{};
  ii.struct_size = sizeof ii;
  rc = inner_->vt->query(inner_ctx_, &ii);
  if (rc != FERRY_OK) {
    return Error(rc, "chaos: query() of the inner transport %s failed (status %d)",
                 inner_->name.c_str(), static_cast<int>(rc));
  }
  // Fields the inner plugin did not write stay zero (ii was zeroed).
  domain_ = ii.domain != nullptr ? ii.domain : "";
  inner_has_reg_ = inner_->Has(CHAOS_VT(reg)) && inner_->Has(CHAOS_VT(dereg));
  inline_limit_ = config_.max_inline_size > 0 ? config_.max_inline_size : UINT64_MAX;

  uint64_t caps = (ii.caps & kPassedCaps) | FERRY_CAP_THREAD_SAFE;
  if (!inner_has_reg_) caps &= ~FERRY_CAP_REGISTRATION;
  int32_t wakeup = -1;
  if ((ii.caps & FERRY_CAP_WAKEUP_FD) != 0 && ii.wakeup_fd >= 0) {
    // One epoll set the host sleeps on: the inner context's wakeup fd, a
    // timer for the earliest held arrival, and an eventfd for events chaos
    // queued itself. All level-triggered.
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epoll_fd_ < 0 || timer_fd_ < 0 || event_fd_ < 0) {
      int err = errno;
      return Error(FERRY_RESOURCE_EXHAUSTED, "chaos: cannot create its wakeup fds: %s",
                   std::strerror(err));
    }
    for (int fd : {ii.wakeup_fd, timer_fd_, event_fd_}) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = fd;
      if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
        int err = errno;
        return Error(FERRY_INTERNAL, "chaos: epoll_ctl(ADD) of fd %d failed: %s", fd,
                     std::strerror(err));
      }
    }
    caps |= FERRY_CAP_WAKEUP_FD;
    wakeup = epoll_fd_;
  }

  description_ = Format("chaos over %s (%s): %s; inner: %s", inner_->name.c_str(),
                        inner_->path.c_str(), config_.Describe().c_str(),
                        ii.description != nullptr ? ii.description : "");
  info_ = ferry_context_info_t{};
  info_.struct_size = sizeof info_;
  info_.max_header_size = ii.max_header_size;
  info_.caps = caps;
  info_.memory_kinds = ii.memory_kinds & FERRY_MEM_HOST;
  info_.max_message_size = ii.max_message_size;
  info_.max_inline_size = std::min(inline_limit_, ii.max_message_size);
  info_.max_segments = ii.max_segments;
  info_.wakeup_fd = wakeup;
  info_.priority = config_.priority;
  info_.domain = domain_.c_str();
  info_.description = description_.c_str();

  FERRY_PLUGIN_LOG(FERRY_LOG_INFO,
                   "context '%s' over %s: %s (replay with FERRY_CHAOS_SEED=%llu)",
                   instance_.c_str(), inner_->name.c_str(), config_.Describe().c_str(),
                   static_cast<unsigned long long>(config_.seed));
  return Status();
}

Context::~Context() {
  if (inner_ctx_ != nullptr) {
    FERRY_PLUGIN_LOG(FERRY_LOG_INFO,
                     "context '%s' (seed=%llu): %llu arrivals from %s, %llu dropped, "
                     "%llu duplicated, %llu lost, %llu delivered",
                     instance_.c_str(), static_cast<unsigned long long>(config_.seed),
                     static_cast<unsigned long long>(stats_.inner_arrivals),
                     inner_->name.c_str(),
                     static_cast<unsigned long long>(stats_.dropped),
                     static_cast<unsigned long long>(stats_.duplicated),
                     static_cast<unsigned long long>(stats_.lost),
                     static_cast<unsigned long long>(stats_.delivered));
    // The host closed everything (ABI); fini releases whatever remains.
    try {
      inner_->vt->fini(inner_ctx_);
    } catch (...) {
      FERRY_PLUGIN_LOG(FERRY_LOG_ERROR, "fini() of the inner transport threw");
    }
  }
  for (Conn* c : retired_) delete c;
  for (auto& kv : conns_) delete kv.second;
  for (Listener* l : listeners_) delete l;
  for (Mr* m : mrs_) delete m;
  CloseFd(&event_fd_);
  CloseFd(&timer_fd_);
  CloseFd(&epoll_fd_);
}

void Context::Query(ferry_context_info_t* info) const {
  ferry_context_info_t out = info_;
  size_t size = std::min<size_t>(info->struct_size, sizeof out);
  out.struct_size = static_cast<uint32_t>(size);
  std::memcpy(info, &out, size);
}

// --- progress ----------------------------------------------------------------

Status Context::Progress(ferry_progress_args_t* args) {
  args->num_events = 0;
  if (args->max_events > 0 &&
      (args->events == nullptr || args->event_stride < FERRY_EVENT_STRUCT_SIZE)) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "chaos: progress() needs an events array and event_stride >= %zu "
                 "(got %p, %llu)",
                 FERRY_EVENT_STRUCT_SIZE, static_cast<void*>(args->events),
                 static_cast<unsigned long long>(args->event_stride));
  }
  if (!retired_.empty()) FreeRetired();
  delivered_messages_.clear();
  now_ns_ = NowNs();
  Status st = PollInner();
  if (!st.ok()) return st;
  now_ns_ = NowNs();
  ReleaseDue(now_ns_);
  args->num_events = Deliver(args);
  UpdateWakeup(now_ns_);
  return Status();
}

Status Context::PollInner() {
  for (int round = 0; round < kMaxInnerRounds; ++round) {
    ferry_progress_args_t pa{};
    pa.struct_size = FERRY_PROGRESS_ARGS_STRUCT_SIZE;
    pa.max_events = kInnerBatch;
    pa.events = inner_events_.data();
    pa.event_stride = sizeof(ferry_event_t);
    ferry_status_t rc = inner_->vt->progress(inner_ctx_, &pa);
    if (rc != FERRY_OK) {
      return Error(rc,
                   "chaos: progress() of the inner transport %s failed "
                   "with status %d",
                   inner_->name.c_str(), static_cast<int>(rc));
    }
    uint32_t n = std::min(pa.num_events, kInnerBatch);
    for (uint32_t i = 0; i < n; ++i) {
      ferry_event_t& ev = inner_events_[i];
      // An older inner plugin writes a smaller event: absent fields are zero.
      if (ev.struct_size < sizeof ev) {
        size_t from = std::max<size_t>(ev.struct_size, sizeof ev.struct_size);
        std::memset(reinterpret_cast<char*>(&ev) + from, 0, sizeof ev - from);
      }
      HandleInner(ev);
    }
    if (n == 0) break;
  }
  return Status();
}

Conn* Context::FindByInner(ferry_conn_t* inner) const {
  auto it = by_inner_.find(inner);
  return it == by_inner_.end() ? nullptr : it->second;
}

void Context::HandleInner(const ferry_event_t& ev) {
  if (ev.type == FERRY_EV_PLACE_DONE) {
    OnDrainDone(ev.user_data, ev.status, ev.message);
    return;
  }
  if (ev.conn == nullptr) {
    FERRY_PLUGIN_LOG(FERRY_LOG_WARN,
                     "inner event of type %d without a connection: ignored",
                     static_cast<int>(ev.type));
    return;
  }
  if (ev.type == FERRY_EV_ACCEPTED) {
    auto* c = new Conn(this, next_ordinal_++, config_.seed, nullptr);
    c->inner = ev.conn;
    conns_[c->ordinal] = c;
    by_inner_[ev.conn] = c;
    Push(FERRY_EV_ACCEPTED, c, ev.user_data);  // the host's listener user_data
    return;
  }
  Conn* c = FindByInner(ev.conn);
  if (c == nullptr) {
    FERRY_PLUGIN_LOG(FERRY_LOG_WARN,
                     "inner event of type %d for an unknown connection: ignored",
                     static_cast<int>(ev.type));
    return;
  }
  switch (ev.type) {
    case FERRY_EV_CONNECTED: {
      Queued& q = Push(FERRY_EV_CONNECTED, c, ev.user_data);
      q.status = ev.status;
      q.message = InnerMessage(ev);
      if (c->closing && q.status == FERRY_OK) {
        q.status = FERRY_CANCELLED;
        q.message = "chaos: connect() cancelled by close()";
      }
      break;
    }
    case FERRY_EV_SEND_DONE: {
      Queued& q = Push(FERRY_EV_SEND_DONE, c, ev.user_data);
      q.status = ev.status;
      q.message = InnerMessage(ev);
      break;
    }
    case FERRY_EV_ARRIVAL:
      OnInnerArrival(c, ev);
      break;
    case FERRY_EV_CONN_BROKEN:
      if (!c->broken) {
        c->broken = true;
        c->broken_status = ev.status != FERRY_OK ? ev.status : FERRY_PEER_GONE;
        c->broken_message = InnerMessage(ev);
        if (c->broken_message.empty()) c->broken_message = "chaos: the connection broke";
        // A message still being received when the connection broke is lost;
        // complete ones are still delivered first (README.md).
        for (auto& h : c->held) {
          if (h->state == Held::State::kDraining) {
            h->state = Held::State::kLost;
            ++stats_.lost;
          }
        }
      }
      MaybeQueueBroken(c);
      break;
    case FERRY_EV_CLOSED: {
      c->inner_closed = true;
      by_inner_.erase(ev.conn);
      if (c->drains > 0) {  // an inner plugin that closed with placements open
        for (auto& kv : drains_) {
          if (kv.second->conn == c) kv.second->conn = nullptr;
        }
        c->drains = 0;
      }
      c->held.clear();
      MaybeQueueBroken(c);  // a break chaos still owed comes before CLOSED
      Push(FERRY_EV_CLOSED, c, ev.user_data);
      break;
    }
    default:
      FERRY_PLUGIN_LOG(FERRY_LOG_DEBUG, "inner event of unknown type %d: ignored",
                       static_cast<int>(ev.type));
      break;
  }
}

void Context::OnInnerArrival(Conn* c, const ferry_event_t& ev) {
  ++stats_.inner_arrivals;
  auto discard = [&] {
    InnerErr e;
    ferry_status_t rc = inner_->vt->discard(c->inner, ev.msg_id, &e.buf);
    if (rc != FERRY_OK) {
      FERRY_PLUGIN_LOG(FERRY_LOG_WARN, "discard() of inner msg_id %llu failed: %s",
                       static_cast<unsigned long long>(ev.msg_id),
                       e.ToStatus(rc, "discard").message.c_str());
    }
  };
  if (c->closing) {  // the inner transport should not, but be safe
    discard();
    return;
  }
  const uint64_t seq = c->next_seq++;
  const ArrivalDraws d = DrawArrival(&c->rng);
  const bool drop = d.drop % 1000 < config_.drop_rate;
  const bool dup = !drop && d.dup % 1000 < config_.dup_rate;
  if (drop) {
    ++stats_.dropped;
    FERRY_PLUGIN_LOG(FERRY_LOG_TRACE, "conn %llu: arrival %llu dropped",
                     static_cast<unsigned long long>(c->ordinal),
                     static_cast<unsigned long long>(seq));
    discard();
    return;
  }
  const uint32_t n = ev.num_segments;
  if (n > 0 && ev.segments == nullptr) {
    FERRY_PLUGIN_LOG(FERRY_LOG_ERROR,
                     "inner ARRIVAL with %u segments and no descriptors: dropped", n);
    ++stats_.lost;
    discard();
    return;
  }
  auto msg = std::make_shared<Message>();
  bool needs_place = false;
  try {
    if (ev.header_len > 0 && ev.header != nullptr) {
      const auto* h = static_cast<const unsigned char*>(ev.header);
      msg->header.assign(h, h + ev.header_len);
    }
    msg->segments.resize(n);
    for (uint32_t i = 0; i < n; ++i) {
      const ferry_arrival_segment_t* s = FERRY_ELEMENT_AT(
          const ferry_arrival_segment_t, ev.segments, ev.segment_stride, i);
      Message::Segment& seg = msg->segments[i];
      seg.length = s->length;
      seg.device = FERRY_FIELD_PRESENT(s, ferry_arrival_segment_t, device)
                       ? s->device
                       : ferry_device_t{FERRY_DEVICE_CPU, 0};
      const void* in = FERRY_FIELD_PRESENT(s, ferry_arrival_segment_t, inline_data)
                           ? s->inline_data
                           : nullptr;
      if (seg.length == 0) continue;
      seg.bytes.reset(new unsigned char[seg.length]);
      if (in != nullptr) {
        std::memcpy(seg.bytes.get(), in, seg.length);
      } else {
        needs_place = true;
      }
    }
  } catch (const std::bad_alloc&) {
    FERRY_PLUGIN_LOG(FERRY_LOG_ERROR, "conn %llu: no memory to hold an arrival: dropped",
                     static_cast<unsigned long long>(c->ordinal));
    ++stats_.lost;
    discard();
    return;
  }
  const uint64_t delay_range = config_.delay_us_max + 1;
  std::vector<std::shared_ptr<Held>> entries;
  auto add = [&](bool duplicate, uint64_t draw) {
    auto h = std::make_shared<Held>();
    h->msg = msg;
    h->seq = seq;
    h->duplicate = duplicate;
    h->delay_ns = config_.delay_us_max > 0 ? (draw % delay_range) * 1000 : 0;
    c->held.push_back(h);
    entries.push_back(std::move(h));
  };
  add(false, d.delay);
  if (dup) {
    ++stats_.duplicated;
    add(true, d.dup_delay);
  }
  if (!needs_place) {
    discard();  // releases the all-inline inner arrival: chaos has the bytes
    for (auto& h : entries) MarkReady(c, h.get(), now_ns_);
    return;
  }
  // The other segments: place()d by chaos into its own buffers.
  auto drain = std::make_unique<Drain>();
  drain->conn = c;
  drain->entries = entries;
  std::vector<ferry_place_dest_t> dests(n);
  for (uint32_t i = 0; i < n; ++i) {
    const ferry_arrival_segment_t* s = FERRY_ELEMENT_AT(
        const ferry_arrival_segment_t, ev.segments, ev.segment_stride, i);
    const bool is_inline = FERRY_FIELD_PRESENT(s, ferry_arrival_segment_t, inline_data) &&
                           s->inline_data != nullptr;
    ferry_place_dest_t& dd = dests[i];
    dd.struct_size = FERRY_PLACE_DEST_STRUCT_SIZE;
    dd.device = ferry_device_t{FERRY_DEVICE_CPU, 0};
    if (!is_inline && msg->segments[i].length > 0) {
      dd.data = msg->segments[i].bytes.get();
      dd.capacity = msg->segments[i].length;
    }
  }
  ferry_place_args_t pa{};
  pa.struct_size = FERRY_PLACE_ARGS_STRUCT_SIZE;
  pa.num_dests = n;
  pa.msg_id = ev.msg_id;
  pa.dests = dests.data();
  pa.dest_stride = sizeof(ferry_place_dest_t);
  pa.user_data = drain.get();
  InnerErr e;
  ferry_status_t rc = inner_->vt->place(c->inner, &pa, &e.buf);
  if (rc != FERRY_OK) {
    FERRY_PLUGIN_LOG(
        FERRY_LOG_INFO, "conn %llu: inner place() refused (%s): arrival %llu lost",
        static_cast<unsigned long long>(c->ordinal),
        e.ToStatus(rc, "place").message.c_str(), static_cast<unsigned long long>(seq));
    discard();
    for (auto& h : entries) h->state = Held::State::kLost;
    ++stats_.lost;
    MaybeQueueBroken(c);
    return;
  }
  ++c->drains;
  void* key = drain.get();
  drains_[key] = std::move(drain);
}

void Context::OnDrainDone(void* user_data, ferry_status_t status, const char* message) {
  auto it = drains_.find(user_data);
  if (it == drains_.end()) {
    FERRY_PLUGIN_LOG(FERRY_LOG_WARN,
                     "inner PLACE_DONE for an unknown placement: ignored");
    return;
  }
  std::unique_ptr<Drain> d = std::move(it->second);
  drains_.erase(it);
  Conn* c = d->conn;
  if (c == nullptr) return;
  --c->drains;
  if (status == FERRY_OK && !c->closing) {
    for (auto& h : d->entries) {
      if (h->state == Held::State::kDraining) MarkReady(c, h.get(), now_ns_);
    }
  } else {
    bool counted = false;
    for (auto& h : d->entries) {
      if (h->state == Held::State::kDraining) {
        h->state = Held::State::kLost;
        counted = true;
      }
    }
    if (counted) {
      ++stats_.lost;
      FERRY_PLUGIN_LOG(FERRY_LOG_DEBUG,
                       "conn %llu: a message being received was lost: %s",
                       static_cast<unsigned long long>(c->ordinal),
                       message != nullptr && message[0] ? message : "placement failed");
    }
  }
  MaybeQueueBroken(c);
}

void Context::MarkReady(Conn* c, Held* h, uint64_t now) {
  h->state = Held::State::kReady;
  h->release_ns = now + h->delay_ns;
  if (!config_.reorder) {  // delays, but the connection's order is kept
    h->release_ns = std::max(h->release_ns, c->last_release_ns);
    c->last_release_ns = h->release_ns;
  }
}

// --- releasing held arrivals ----------------------------------------------

void Context::ReleaseDue(uint64_t now) {
  std::vector<std::pair<Conn*, std::shared_ptr<Message>>> batch;
  for (auto& kv : conns_) {
    Conn* c = kv.second;
    auto& q = c->held;
    if (q.empty()) continue;
    if (!config_.reorder) {
      while (!q.empty()) {
        Held* f = q.front().get();
        if (f->state == Held::State::kLost) {
          q.pop_front();
        } else if (f->state == Held::State::kReady && f->release_ns <= now) {
          batch.emplace_back(c, f->msg);
          q.pop_front();
        } else {
          break;
        }
      }
    } else {
      size_t w = 0;
      for (size_t r = 0; r < q.size(); ++r) {
        Held* h = q[r].get();
        if (h->state == Held::State::kLost) continue;
        if (h->state == Held::State::kReady && h->release_ns <= now) {
          batch.emplace_back(c, h->msg);
          continue;
        }
        if (w != r) q[w] = std::move(q[r]);
        ++w;
      }
      q.resize(w);
    }
  }
  if (config_.reorder && batch.size() > 1) release_rng_.Shuffle(&batch);
  for (auto& [c, msg] : batch) QueueArrival(c, msg);
  // Breaks owed once a connection's complete arrivals are all out.
  for (auto& kv : conns_) {
    if (kv.second->broken && !kv.second->broken_queued) MaybeQueueBroken(kv.second);
  }
}

void Context::QueueArrival(Conn* c, const std::shared_ptr<Message>& msg) {
  const uint64_t id = next_msg_id_++;
  Delivered d;
  d.msg = msg;
  d.segments.resize(msg->segments.size());
  for (size_t i = 0; i < msg->segments.size(); ++i) {
    const Message::Segment& s = msg->segments[i];
    ferry_arrival_segment_t& a = d.segments[i];
    a.struct_size = FERRY_ARRIVAL_SEGMENT_STRUCT_SIZE;
    a.reserved = 0;
    a.length = s.length;
    a.device = s.device;
    if (s.length <= inline_limit_) {
      a.inline_data = s.bytes ? static_cast<const void*>(s.bytes.get()) : kEmpty;
    } else {
      a.inline_data = nullptr;
    }
  }
  c->arrivals.emplace(id, std::move(d));
  Push(FERRY_EV_ARRIVAL, c, nullptr).msg_id = id;
  ++stats_.delivered;
}

void Context::MaybeQueueBroken(Conn* c) {
  if (!c->broken || c->broken_queued) return;
  for (const auto& h : c->held) {
    if (h->state != Held::State::kLost) return;  // still to be delivered
  }
  c->held.clear();
  Queued& q = Push(FERRY_EV_CONN_BROKEN, c, nullptr);
  q.status = c->broken_status;
  q.message = c->broken_message;
  c->broken_queued = true;
}

Context::Queued& Context::Push(int32_t type, Conn* c, void* user_data) {
  Queued& q = queue_.emplace_back();
  q.type = type;
  q.conn = c;
  q.user_data = user_data;
  return q;
}

uint32_t Context::Deliver(ferry_progress_args_t* args) {
  const size_t stride = static_cast<size_t>(args->event_stride);
  const size_t size = std::min(stride, sizeof(ferry_event_t));
  uint32_t count = 0;
  while (count < args->max_events && !queue_.empty()) {
    Queued q = std::move(queue_.front());
    queue_.pop_front();
    if (q.suppressed) continue;
    ferry_event_t ev{};
    ev.struct_size = static_cast<uint32_t>(size);
    ev.type = q.type;
    ev.status = q.status;
    ev.conn = reinterpret_cast<ferry_conn_t*>(q.conn);
    ev.user_data = q.user_data;
    ev.conn_user_data = q.conn != nullptr ? q.conn->user_data : nullptr;
    if (!q.message.empty()) {
      delivered_messages_.push_back(std::move(q.message));
      ev.message = delivered_messages_.back().c_str();
    } else {
      ev.message = "";
    }
    if (q.type == FERRY_EV_ARRIVAL) {
      auto it = q.conn->arrivals.find(q.msg_id);
      if (it == q.conn->arrivals.end()) continue;  // released by close()
      Delivered& d = it->second;
      d.returned = true;
      ev.msg_id = q.msg_id;
      ev.header = d.msg->header.empty() ? kEmpty : d.msg->header.data();
      ev.header_len = d.msg->header.size();
      ev.num_segments = static_cast<uint32_t>(d.segments.size());
      ev.segments = d.segments.empty() ? nullptr : d.segments.data();
      ev.segment_stride = sizeof(ferry_arrival_segment_t);
    }
    std::memcpy(reinterpret_cast<char*>(args->events) + stride * count, &ev, size);
    ++count;
    if (q.type == FERRY_EV_CLOSED) {
      // The handle is invalid for the host from now on; freed at the start
      // of the next progress(), after the host is done with this batch.
      conns_.erase(q.conn->ordinal);
      retired_.push_back(q.conn);
    }
  }
  return count;
}

uint64_t Context::EarliestRelease() const {
  uint64_t best = 0;
  for (const auto& kv : conns_) {
    for (const auto& h : kv.second->held) {
      if (h->state == Held::State::kLost) continue;
      if (h->state == Held::State::kReady && (best == 0 || h->release_ns < best)) {
        best = h->release_ns;
      }
      // Without reorder only the front can go next.
      if (!config_.reorder) break;
    }
  }
  return best;
}

void Context::UpdateWakeup(uint64_t /*now*/) {
  if (epoll_fd_ < 0) return;
  const bool want = !queue_.empty();
  if (want && !event_signalled_) {
    uint64_t one = 1;
    if (write(event_fd_, &one, sizeof one) == sizeof one) event_signalled_ = true;
  } else if (!want && event_signalled_) {
    uint64_t value;
    if (read(event_fd_, &value, sizeof value) == sizeof value || errno == EAGAIN) {
      event_signalled_ = false;
    }
  }
  // Re-arming (or disarming) a timerfd also clears an expiry not yet read,
  // so the fd is readable exactly while a held arrival is due.
  const uint64_t t = EarliestRelease();
  if (t != timer_armed_ns_) {
    itimerspec its{};
    if (t != 0) {
      its.it_value.tv_sec = static_cast<time_t>(t / 1000000000ull);
      its.it_value.tv_nsec = static_cast<long>(t % 1000000000ull);
      if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;
    }
    if (timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &its, nullptr) == 0) {
      timer_armed_ns_ = t;
    } else {
      FERRY_PLUGIN_LOG(FERRY_LOG_ERROR, "timerfd_settime failed: %s",
                       std::strerror(errno));
    }
  }
}

void Context::FreeRetired() {
  for (Conn* c : retired_) delete c;
  retired_.clear();
}

// --- host calls --------------------------------------------------------------

Status Context::Listen(const ferry_listen_args_t& args, Listener** out) {
  auto l = std::make_unique<Listener>(this);
  ferry_listen_args_t la{};
  la.struct_size = FERRY_LISTEN_ARGS_STRUCT_SIZE;
  la.address = args.address;
  la.user_data = args.user_data;  // comes back in the inner ACCEPTED as is
  InnerErr e;
  ferry_status_t rc = inner_->vt->listen(inner_ctx_, &la, &l->inner, &e.buf);
  if (rc != FERRY_OK) return e.ToStatus(rc, "listen");
  listeners_.push_back(l.get());
  *out = l.release();
  return Status();
}

Status Context::ListenerAddress(Listener* l, char* buf, uint64_t buf_len) {
  ferry_status_t rc = inner_->vt->listener_address(l->inner, buf, buf_len);
  if (rc != FERRY_OK) {
    return Error(rc,
                 "chaos: listener_address() of the inner transport failed "
                 "with status %d",
                 static_cast<int>(rc));
  }
  return Status();
}

void Context::CloseListener(Listener* l) {
  inner_->vt->close_listener(l->inner);
  listeners_.erase(std::remove(listeners_.begin(), listeners_.end(), l),
                   listeners_.end());
  delete l;
}

Status Context::Connect(const ferry_connect_args_t& args, Conn** out) {
  auto c = std::make_unique<Conn>(this, next_ordinal_, config_.seed, args.user_data);
  ferry_connect_args_t ca{};
  ca.struct_size = FERRY_CONNECT_ARGS_STRUCT_SIZE;
  ca.address = args.address;
  ca.user_data = args.user_data;  // comes back in the inner CONNECTED as is
  InnerErr e;
  ferry_status_t rc = inner_->vt->connect(inner_ctx_, &ca, &c->inner, &e.buf);
  if (rc != FERRY_OK) return e.ToStatus(rc, "connect");
  ++next_ordinal_;
  c->connect_address = args.address != nullptr ? args.address : "";
  by_inner_[c->inner] = c.get();
  conns_[c->ordinal] = c.get();
  *out = c.release();
  return Status();
}

Status Context::Send(Conn* c, const ferry_send_args_t* args) {
  if (c->closing || c->inner_closed) {
    return Error(FERRY_FAILED_PRECONDITION,
                 "chaos: send() on a connection the host is closing");
  }
  const ferry_send_args_t* use = args;
  ferry_send_args_t copy{};
  std::vector<ferry_segment_t> segs;
  // Registrations chaos handed out itself (the inner transport has no reg())
  // mean nothing to the inner transport: strip them. Only then are the
  // descriptors read here; otherwise the inner send() checks them.
  if (!inner_has_reg_ && !mrs_.empty() && args->num_segments > 0 &&
      args->segments != nullptr &&
      args->segment_stride >= FERRY_STRUCT_SIZE(ferry_segment_t, length)) {
    segs.resize(args->num_segments);
    for (uint32_t i = 0; i < args->num_segments; ++i) {
      const ferry_segment_t* s = FERRY_ELEMENT_AT(const ferry_segment_t, args->segments,
                                                  args->segment_stride, i);
      size_t n = std::min<size_t>({s->struct_size, sizeof(ferry_segment_t),
                                   static_cast<size_t>(args->segment_stride)});
      std::memcpy(&segs[i], s, n);
      segs[i].struct_size = sizeof(ferry_segment_t);
      segs[i].mr = nullptr;
    }
    std::memcpy(&copy, args, sizeof copy);
    copy.struct_size = sizeof copy;
    copy.segments = segs.data();
    copy.segment_stride = sizeof(ferry_segment_t);
    use = &copy;
  }
  InnerErr e;
  ferry_status_t rc = inner_->vt->send(c->inner, use, &e.buf);
  if (rc != FERRY_OK) return e.ToStatus(rc, "send");
  return Status();
}

Status Context::Place(Conn* c, const ferry_place_args_t& args) {
  if (c->closing) {
    return Error(FERRY_FAILED_PRECONDITION,
                 "chaos: place() on a connection the host is closing");
  }
  auto it = c->arrivals.find(args.msg_id);
  if (it == c->arrivals.end() || !it->second.returned) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "chaos: place(): msg_id %llu is not an unanswered arrival on "
                 "this connection",
                 static_cast<unsigned long long>(args.msg_id));
  }
  Delivered& d = it->second;
  if (args.num_dests != d.segments.size()) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "chaos: place(): %u destinations for an arrival of %zu segments",
                 args.num_dests, d.segments.size());
  }
  // Inline segments: no bytes move (the host copied them). The others (only
  // with max_inline_size set): checked first, then copied from chaos's
  // buffer; a NULL destination drops the segment.
  for (uint32_t i = 0; i < args.num_dests; ++i) {
    if (d.segments[i].inline_data != nullptr) continue;
    if (args.dests == nullptr ||
        args.dest_stride < FERRY_STRUCT_SIZE(ferry_place_dest_t, capacity)) {
      return Error(FERRY_INVALID_ARGUMENT,
                   "chaos: place() needs destination descriptors (got %p, "
                   "dest_stride %llu)",
                   static_cast<const void*>(args.dests),
                   static_cast<unsigned long long>(args.dest_stride));
    }
    const ferry_place_dest_t* dest =
        FERRY_ELEMENT_AT(const ferry_place_dest_t, args.dests, args.dest_stride, i);
    if (dest->data == nullptr) continue;
    if (dest->capacity < d.segments[i].length) {
      return Error(FERRY_INVALID_ARGUMENT,
                   "chaos: place(): destination %u holds %llu bytes, the segment "
                   "has %llu",
                   i, static_cast<unsigned long long>(dest->capacity),
                   static_cast<unsigned long long>(d.segments[i].length));
    }
    if (FERRY_FIELD_PRESENT(dest, ferry_place_dest_t, device) &&
        args.dest_stride >= FERRY_STRUCT_SIZE(ferry_place_dest_t, device) &&
        !HostDevice(dest->device)) {
      return Error(FERRY_INVALID_ARGUMENT,
                   "chaos: place(): destination %u is device memory (type %d); "
                   "chaos copies into host memory only",
                   i, static_cast<int>(dest->device.type));
    }
  }
  for (uint32_t i = 0; i < args.num_dests; ++i) {
    if (d.segments[i].inline_data != nullptr || d.segments[i].length == 0) continue;
    const ferry_place_dest_t* dest =
        FERRY_ELEMENT_AT(const ferry_place_dest_t, args.dests, args.dest_stride, i);
    if (dest->data == nullptr) continue;
    std::memcpy(dest->data, d.msg->segments[i].bytes.get(), d.segments[i].length);
  }
  Push(FERRY_EV_PLACE_DONE, c, args.user_data);
  c->arrivals.erase(it);
  return Status();
}

Status Context::Discard(Conn* c, uint64_t msg_id) {
  if (c->closing) {
    return Error(FERRY_FAILED_PRECONDITION,
                 "chaos: discard() on a connection the host is closing (close() "
                 "released every arrival)");
  }
  auto it = c->arrivals.find(msg_id);
  if (it == c->arrivals.end() || !it->second.returned) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "chaos: discard(): msg_id %llu is not an unanswered arrival on "
                 "this connection",
                 static_cast<unsigned long long>(msg_id));
  }
  c->arrivals.erase(it);
  return Status();
}

void Context::Close(Conn* c) {
  if (c->closing) return;
  c->closing = true;
  if (!c->inner_closed) inner_->vt->close(c->inner);
  // Held arrivals the host has not seen are dropped; queued ones are
  // recalled; a CONNECTED not yet returned is cancelled; arrivals the host
  // holds are released.
  for (auto& h : c->held) h->state = Held::State::kLost;
  c->held.clear();
  for (Queued& q : queue_) {
    if (q.conn != c) continue;
    if (q.type == FERRY_EV_ARRIVAL) {
      q.suppressed = true;
    } else if (q.type == FERRY_EV_CONNECTED && q.status == FERRY_OK) {
      q.status = FERRY_CANCELLED;
      q.message = "chaos: connect() cancelled by close()";
    }
  }
  c->arrivals.clear();
  MaybeQueueBroken(c);
}

Status Context::Reg(const ferry_reg_args_t* args, ferry_mr_t** out) {
  if (inner_has_reg_) {
    InnerErr e;
    ferry_status_t rc = inner_->vt->reg(inner_ctx_, args, out, &e.buf);
    if (rc != FERRY_OK) return e.ToStatus(rc, "reg");
    return Status();
  }
  // Nothing to register with: a token the host may pass with segments.
  auto* m = new Mr();
  mrs_.push_back(m);
  *out = reinterpret_cast<ferry_mr_t*>(m);
  return Status();
}

void Context::Dereg(ferry_mr_t* mr) {
  if (mr == nullptr) return;
  if (inner_has_reg_) {
    inner_->vt->dereg(inner_ctx_, mr);
    return;
  }
  auto* m = reinterpret_cast<Mr*>(mr);
  auto it = std::find(mrs_.begin(), mrs_.end(), m);
  if (it == mrs_.end()) {
    FERRY_PLUGIN_LOG(FERRY_LOG_ERROR, "dereg() of an unknown registration: ignored");
    return;
  }
  mrs_.erase(it);
  delete m;
}

Status Context::PeerAddress(Conn* c, char* buf, uint64_t buf_len) {
  if (inner_->Has(CHAOS_VT(conn_peer_address)) && !c->inner_closed) {
    ferry_status_t rc = inner_->vt->conn_peer_address(c->inner, buf, buf_len);
    if (rc != FERRY_OK) {
      return Error(rc,
                   "chaos: conn_peer_address() of the inner transport failed "
                   "with status %d",
                   static_cast<int>(rc));
    }
    return Status();
  }
  if (c->connect_address.empty()) {
    return Error(FERRY_UNIMPLEMENTED,
                 "chaos: the inner transport %s has no conn_peer_address and "
                 "this connection was accepted",
                 inner_->name.c_str());
  }
  if (buf == nullptr || buf_len < c->connect_address.size() + 1) {
    return Error(FERRY_RESOURCE_EXHAUSTED, "chaos: the address needs %zu bytes",
                 c->connect_address.size() + 1);
  }
  std::memcpy(buf, c->connect_address.c_str(), c->connect_address.size() + 1);
  return Status();
}

}  // namespace ferry_chaos
