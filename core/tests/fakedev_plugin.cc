// "fakedev": a test-only transport that claims to move CUDA memory, for
// testing the core's device paths on a machine with no GPU (routing per
// message, the second connection per peer, staging, receive placement into
// device memory and the device allocator). Its "device memory" is host
// memory tagged as cuda:N: what cannot exist here (a GPU) is faked, and
// only that; the real device paths are device_rpc_test.cc's, over cuda_ipc.
//
// An in-process loopback: contexts of one process reach each other through
// a registry of listeners. Reliable and ordered; segments above 64 bytes
// are placed (place() copies them), smaller ones arrive inline. Every
// arrival segment reports the device its sender gave.
//
// Environment, read at init: FERRY_FAKEDEV_DOMAIN (default "fake-host"),
// the context's domain (another value plays another host);
// FERRY_FAKEDEV_HOST_ONLY=1 moves host memory only and offers no memory
// services; FERRY_FAKEDEV_PRIORITY (default 5, like cuda_ipc).
#include <ferry/transport.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace {

struct Seg {
  std::vector<uint8_t> bytes;
  ferry_device_t device{};
};
struct Msg {
  uint64_t id = 0;
  std::vector<uint8_t> header;
  std::vector<Seg> segs;
  std::vector<ferry_arrival_segment_t> arrival;  // while held
};
struct Ev {
  int32_t type = 0;
  ferry_status_t status = FERRY_OK;
  ferry_conn_t* conn = nullptr;
  void* user_data = nullptr;
  std::string message;
};

// One lock for every context: a test transport, simplicity over speed.
std::mutex g_mu;
uint64_t g_next_address = 1;
std::atomic<uint64_t> g_next_msg{1};

}  // namespace

struct ferry_listener {
  ferry_context_t* ctx = nullptr;
  std::string address;
  void* user_data = nullptr;
};

struct ferry_conn {
  ferry_context_t* ctx = nullptr;
  ferry_conn_t* peer = nullptr;
  void* user_data = nullptr;
  bool closed = false;
  bool broken = false;
  std::deque<std::unique_ptr<Msg>> inbox;
  std::unique_ptr<Msg> held;
};

struct ferry_context {
  std::string domain;
  bool host_only = false;
  int32_t priority = 5;
  std::deque<Ev> events;
  std::set<ferry_conn_t*> conns;
  std::string last_message;
};

namespace {

std::map<std::string, ferry_listener_t*>& Registry() {
  static auto* r = new std::map<std::string, ferry_listener_t*>();
  return *r;
}

void Push(ferry_context_t* ctx, int32_t type, ferry_conn_t* conn, void* user_data,
          ferry_status_t status = FERRY_OK, const std::string& message = "") {
  ctx->events.push_back(Ev{type, status, conn, user_data, message});
}

// The peer learns that this end went away.
void BreakPeer(ferry_conn_t* c) {
  ferry_conn_t* p = c->peer;
  c->peer = nullptr;
  if (p == nullptr) return;
  p->peer = nullptr;
  if (!p->closed && !p->broken) {
    p->broken = true;
    Push(p->ctx, FERRY_EV_CONN_BROKEN, p, nullptr, FERRY_PEER_GONE,
         "fakedev: the peer closed the connection");
  }
}

ferry_status_t Init(const ferry_init_args_t*, ferry_context_t** out, ferry_error_buf_t*) {
  auto* ctx = new ferry_context();
  const char* d = std::getenv("FERRY_FAKEDEV_DOMAIN");
  ctx->domain = d != nullptr && *d != '\0' ? d : "fake-host";
  const char* h = std::getenv("FERRY_FAKEDEV_HOST_ONLY");
  ctx->host_only = h != nullptr && h[0] == '1';
  if (const char* p = std::getenv("FERRY_FAKEDEV_PRIORITY")) ctx->priority = std::atoi(p);
  *out = ctx;
  return FERRY_OK;
}

void Fini(ferry_context_t* ctx) {
  std::lock_guard<std::mutex> l(g_mu);
  for (ferry_conn_t* c : ctx->conns) {
    BreakPeer(c);
    delete c;
  }
  for (auto it = Registry().begin(); it != Registry().end();) {
    if (it->second->ctx == ctx) {
      delete it->second;
      it = Registry().erase(it);
    } else {
      ++it;
    }
  }
  delete ctx;
}

ferry_status_t Query(ferry_context_t* ctx, ferry_context_info_t* info) {
  info->max_header_size = 4096;
  info->caps = FERRY_CAP_ORDERED | FERRY_CAP_DETECTS_PEER_DEATH;
  info->memory_kinds = ctx->host_only ? FERRY_MEM_HOST : FERRY_MEM_HOST | FERRY_MEM_CUDA;
  info->max_message_size = uint64_t{1} << 32;
  info->max_inline_size = 64;
  info->max_segments = 64;
  info->wakeup_fd = -1;
  info->priority = ctx->priority;
  info->domain = ctx->domain.c_str();
  info->description = "test fixture: in-process loopback, fake CUDA memory";
  return FERRY_OK;
}

ferry_status_t Progress(ferry_context_t* ctx, ferry_progress_args_t* a) {
  std::lock_guard<std::mutex> l(g_mu);
  a->num_events = 0;
  std::vector<ferry_conn_t*> freed;
  while (a->num_events < a->max_events && !ctx->events.empty()) {
    Ev ev = std::move(ctx->events.front());
    ctx->events.pop_front();
    auto* out =
        FERRY_ELEMENT_AT(ferry_event_t, a->events, a->event_stride, a->num_events);
    ferry_event_t e{};
    e.struct_size = FERRY_EVENT_STRUCT_SIZE;
    e.type = ev.type;
    e.status = ev.status;
    e.conn = ev.conn;
    e.user_data = ev.user_data;
    e.conn_user_data = ev.conn != nullptr ? ev.conn->user_data : nullptr;
    ctx->last_message = ev.message;
    e.message = ev.status != FERRY_OK ? ctx->last_message.c_str() : nullptr;
    if (ev.type == FERRY_EV_CLOSED) freed.push_back(ev.conn);
    std::memcpy(out, &e, std::min<uint64_t>(a->event_stride, sizeof e));
    out->struct_size =
        static_cast<uint32_t>(std::min<uint64_t>(a->event_stride, sizeof e));
    ++a->num_events;
  }
  for (ferry_conn_t* c : freed) {
    ctx->conns.erase(c);
    delete c;
  }
  if (!ctx->events.empty()) return FERRY_OK;
  for (ferry_conn_t* c : ctx->conns) {
    if (a->num_events >= a->max_events) break;
    if (c->closed || c->held || c->inbox.empty()) continue;
    c->held = std::move(c->inbox.front());
    c->inbox.pop_front();
    Msg& m = *c->held;
    m.arrival.resize(m.segs.size());
    for (size_t i = 0; i < m.segs.size(); ++i) {
      ferry_arrival_segment_t& s = m.arrival[i];
      s = {};
      s.struct_size = FERRY_ARRIVAL_SEGMENT_STRUCT_SIZE;
      s.length = m.segs[i].bytes.size();
      s.device = m.segs[i].device;
      s.inline_data = s.length <= 64 ? m.segs[i].bytes.data() : nullptr;
    }
    auto* out =
        FERRY_ELEMENT_AT(ferry_event_t, a->events, a->event_stride, a->num_events);
    ferry_event_t e{};
    e.struct_size = FERRY_EVENT_STRUCT_SIZE;
    e.type = FERRY_EV_ARRIVAL;
    e.conn = c;
    e.conn_user_data = c->user_data;
    e.num_segments = static_cast<uint32_t>(m.segs.size());
    e.msg_id = m.id;
    e.header = m.header.data();
    e.header_len = m.header.size();
    e.segments = m.arrival.data();
    e.segment_stride = sizeof(ferry_arrival_segment_t);
    std::memcpy(out, &e, std::min<uint64_t>(a->event_stride, sizeof e));
    out->struct_size =
        static_cast<uint32_t>(std::min<uint64_t>(a->event_stride, sizeof e));
    ++a->num_events;
  }
  return FERRY_OK;
}

ferry_status_t Listen(ferry_context_t* ctx, const ferry_listen_args_t* a,
                      ferry_listener_t** out, ferry_error_buf_t*) {
  std::lock_guard<std::mutex> l(g_mu);
  auto* lis = new ferry_listener();
  lis->ctx = ctx;
  lis->user_data = a->user_data;
  lis->address = "fakedev:" + std::to_string(g_next_address++);
  Registry()[lis->address] = lis;
  *out = lis;
  return FERRY_OK;
}

ferry_status_t ListenerAddress(ferry_listener_t* lis, char* buf, uint64_t n) {
  if (lis->address.size() + 1 > n) return FERRY_RESOURCE_EXHAUSTED;
  std::memcpy(buf, lis->address.c_str(), lis->address.size() + 1);
  return FERRY_OK;
}

void CloseListener(ferry_listener_t* lis) {
  std::lock_guard<std::mutex> l(g_mu);
  Registry().erase(lis->address);
  delete lis;
}

ferry_status_t Connect(ferry_context_t* ctx, const ferry_connect_args_t* a,
                       ferry_conn_t** out, ferry_error_buf_t*) {
  std::lock_guard<std::mutex> l(g_mu);
  auto* c = new ferry_conn();
  c->ctx = ctx;
  c->user_data = a->user_data;
  ctx->conns.insert(c);
  *out = c;
  auto it = Registry().find(a->address);
  if (it == Registry().end()) {
    c->broken = true;
    Push(ctx, FERRY_EV_CONNECTED, c, a->user_data, FERRY_UNAVAILABLE,
         std::string("fakedev: nothing listens at ") + a->address);
    return FERRY_OK;
  }
  auto* s = new ferry_conn();
  s->ctx = it->second->ctx;
  s->peer = c;
  c->peer = s;
  s->ctx->conns.insert(s);
  Push(s->ctx, FERRY_EV_ACCEPTED, s, it->second->user_data);
  Push(ctx, FERRY_EV_CONNECTED, c, a->user_data);
  return FERRY_OK;
}

void SetConnUserData(ferry_conn_t* c, void* ud) {
  std::lock_guard<std::mutex> l(g_mu);
  c->user_data = ud;
}

ferry_status_t Send(ferry_conn_t* c, const ferry_send_args_t* a, ferry_error_buf_t* err) {
  std::lock_guard<std::mutex> l(g_mu);
  if (c->closed) return FERRY_FAILED_PRECONDITION;
  if (c->broken) {
    ferry_error_printf(err, "fakedev: the connection is broken");
    return FERRY_PEER_GONE;
  }
  auto m = std::make_unique<Msg>();
  m->id = g_next_msg++;
  const auto* h = static_cast<const uint8_t*>(a->header);
  m->header.assign(h, h + a->header_len);
  for (uint32_t i = 0; i < a->num_segments; ++i) {
    const auto* s =
        FERRY_ELEMENT_AT(const ferry_segment_t, a->segments, a->segment_stride, i);
    if (s->device.type != FERRY_DEVICE_CPU && s->device.type != FERRY_DEVICE_CUDA &&
        s->device.type != FERRY_DEVICE_CUDA_HOST) {
      ferry_error_printf(err, "fakedev: unsupported device type %d", s->device.type);
      return FERRY_INVALID_ARGUMENT;
    }
    if (s->device.type == FERRY_DEVICE_CUDA && c->ctx->host_only) {
      ferry_error_printf(err, "fakedev: host-only, cannot send device memory");
      return FERRY_INVALID_ARGUMENT;
    }
    Seg seg;
    const auto* p = static_cast<const uint8_t*>(s->data);
    seg.bytes.assign(p, p + s->length);  // "device memory" is host memory here
    seg.device = s->device;
    m->segs.push_back(std::move(seg));
  }
  if (c->peer != nullptr && !c->peer->closed) c->peer->inbox.push_back(std::move(m));
  Push(c->ctx, FERRY_EV_SEND_DONE, nullptr, a->user_data);
  return FERRY_OK;
}

ferry_status_t Place(ferry_conn_t* c, const ferry_place_args_t* a,
                     ferry_error_buf_t* err) {
  std::lock_guard<std::mutex> l(g_mu);
  if (!c->held || c->held->id != a->msg_id || a->num_dests != c->held->segs.size()) {
    ferry_error_printf(err, "fakedev: no such arrival");
    return FERRY_INVALID_ARGUMENT;
  }
  Msg& m = *c->held;
  for (uint32_t i = 0; i < a->num_dests; ++i) {
    const auto* d =
        FERRY_ELEMENT_AT(const ferry_place_dest_t, a->dests, a->dest_stride, i);
    if (m.arrival[i].inline_data != nullptr || d->data == nullptr) continue;
    if (d->capacity < m.segs[i].bytes.size()) return FERRY_INVALID_ARGUMENT;
    if (!m.segs[i].bytes.empty()) {
      std::memcpy(d->data, m.segs[i].bytes.data(), m.segs[i].bytes.size());
    }
  }
  c->held.reset();
  Push(c->ctx, FERRY_EV_PLACE_DONE, c, a->user_data);
  return FERRY_OK;
}

ferry_status_t Discard(ferry_conn_t* c, uint64_t msg_id, ferry_error_buf_t*) {
  std::lock_guard<std::mutex> l(g_mu);
  if (!c->held || c->held->id != msg_id) return FERRY_INVALID_ARGUMENT;
  c->held.reset();
  return FERRY_OK;
}

void Close(ferry_conn_t* c) {
  std::lock_guard<std::mutex> l(g_mu);
  if (c->closed) return;
  c->closed = true;
  c->held.reset();
  c->inbox.clear();
  BreakPeer(c);
  Push(c->ctx, FERRY_EV_CLOSED, c, nullptr);
}

ferry_status_t PeerAddress(ferry_conn_t*, char* buf, uint64_t n) {
  std::snprintf(buf, n, "fakedev-peer");
  return FERRY_OK;
}

ferry_status_t MemAlloc(ferry_context_t* ctx, ferry_device_t device, uint64_t length,
                        void** out, ferry_error_buf_t* err) {
  if (device.type != FERRY_DEVICE_CUDA) {
    ferry_error_printf(err, "fakedev: mem_alloc for device type %d", device.type);
    return FERRY_INVALID_ARGUMENT;
  }
  *out = std::aligned_alloc(256, (length + 255) / 256 * 256);
  return *out != nullptr ? FERRY_OK : FERRY_RESOURCE_EXHAUSTED;
}

void MemFree(ferry_context_t*, ferry_device_t, void* data) {
  std::free(data);
}

ferry_status_t MemCopy(ferry_context_t*, void* dst, ferry_device_t, const void* src,
                       ferry_device_t, uint64_t length, uint64_t, ferry_error_buf_t*) {
  std::memcpy(dst, src, length);
  return FERRY_OK;
}

ferry_transport_vtable_t MakeVtable(bool services) {
  ferry_transport_vtable_t v{};
  v.struct_size = FERRY_TRANSPORT_VTABLE_STRUCT_SIZE;
  v.init = Init;
  v.fini = Fini;
  v.query = Query;
  v.progress = Progress;
  v.listen = Listen;
  v.listener_address = ListenerAddress;
  v.close_listener = CloseListener;
  v.connect = Connect;
  v.set_conn_user_data = SetConnUserData;
  v.send = Send;
  v.place = Place;
  v.discard = Discard;
  v.close = Close;
  v.conn_peer_address = PeerAddress;
  if (services) {
    v.mem_alloc = MemAlloc;
    v.mem_free = MemFree;
    v.mem_copy = MemCopy;
  }
  return v;
}

}  // namespace

extern "C" FERRY_TRANSPORT_EXPORT ferry_status_t
ferry_transport_negotiate(ferry_negotiate_args_t* args) {
  static const ferry_transport_vtable_t full = MakeVtable(true);
  static const ferry_transport_vtable_t host_only = MakeVtable(false);
  const char* h = std::getenv("FERRY_FAKEDEV_HOST_ONLY");
  args->plugin_abi_major = FERRY_TRANSPORT_ABI_MAJOR;
  args->plugin_minor_min = 2;
  args->plugin_minor_max = 2;
  if (args->abi_major != FERRY_TRANSPORT_ABI_MAJOR || args->abi_minor_min > 2 ||
      args->abi_minor_max < 2) {
    return FERRY_INCOMPATIBLE;
  }
  args->chosen_minor = 2;
  args->features = FERRY_FEATURE_MULTI_CONTEXT;
  args->name = "fakedev";
  args->version = "test";
  args->vtable = h != nullptr && h[0] == '1' ? &host_only : &full;
  return FERRY_OK;
}
