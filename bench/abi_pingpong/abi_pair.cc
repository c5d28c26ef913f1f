#include "abi_pingpong/abi_pair.h"

#include <dlfcn.h>
#include <poll.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace ferry::bench {
namespace {

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "ferry-bench: %s\n", what);
  std::exit(1);
}

int64_t GetParam(void*, const char* plugin, const char* key, char* buf,
                 uint64_t buf_len) {
  std::string name = std::string("FERRY_") + plugin + "_" + key;
  for (char& c : name) c = static_cast<char>(std::toupper(c));
  const char* value = std::getenv(name.c_str());
  if (value == nullptr) return -1;
  std::snprintf(buf, buf_len, "%s", value);
  return static_cast<int64_t>(std::strlen(value));
}

void Log(void*, int32_t, const char*, const char*) {}

}  // namespace

struct AbiPair::Side {
  ferry_context_t* ctx = nullptr;
  ferry_conn_t* conn = nullptr;
  int wakeup_fd = -1;
  bool busy = false;
  ferry_event_t ev[16];
  bool connected = false;
  bool have_arrival = false;
  uint64_t msg_id = 0;
  const void* inline_data = nullptr;
  uint64_t length = 0;
  uint64_t sends_posted = 0;
  uint64_t sends_done = 0;
};

AbiPair::AbiPair() : client_(new Side), server_(new Side) {}

std::unique_ptr<AbiPair> AbiPair::Open(const std::string& plugin_path, bool busy) {
  std::unique_ptr<AbiPair> p(new AbiPair);
  // Never unloaded: the process ends with the benchmark.
  void* lib = dlopen(plugin_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) Die(dlerror());
  auto negotiate = reinterpret_cast<ferry_transport_negotiate_fn>(
      dlsym(lib, FERRY_TRANSPORT_ENTRY_SYMBOL));
  if (negotiate == nullptr) Die("the plugin exports no entry point");
  static ferry_host_services_t host{};
  host.struct_size = sizeof host;
  host.log_level = -1;
  host.log = Log;
  host.get_param = GetParam;
  ferry_negotiate_args_t na{};
  na.struct_size = sizeof na;
  na.abi_major = FERRY_TRANSPORT_ABI_MAJOR;
  na.abi_minor_min = 1;
  na.abi_minor_max = FERRY_TRANSPORT_ABI_MINOR;
  na.host = &host;
  if (negotiate(&na) != FERRY_OK) Die("ABI negotiation with the plugin failed");
  p->vt_ = na.vtable;

  ferry_init_args_t init{};
  init.struct_size = sizeof init;
  init.flags = busy ? FERRY_INIT_BUSY_POLL : 0;
  for (Side* s : {p->client_.get(), p->server_.get()}) {
    s->busy = busy;
    if (p->vt_->init(&init, &s->ctx, nullptr) != FERRY_OK) Die("init() failed");
    ferry_context_info_t info{};
    info.struct_size = sizeof info;
    p->vt_->query(s->ctx, &info);
    s->wakeup_fd = info.wakeup_fd;
  }
  ferry_listen_args_t la{};
  la.struct_size = sizeof la;
  la.address = "";
  if (p->vt_->listen(p->server_->ctx, &la, &p->listener_, nullptr) != FERRY_OK) {
    Die("listen() failed");
  }
  char address[256];
  p->vt_->listener_address(p->listener_, address, sizeof address);
  ferry_connect_args_t ca{};
  ca.struct_size = sizeof ca;
  ca.address = address;
  if (p->vt_->connect(p->client_->ctx, &ca, &p->client_->conn, nullptr) != FERRY_OK) {
    Die("connect() failed");
  }
  while (!p->client_->connected || p->server_->conn == nullptr) {
    p->Poll(*p->client_);
    p->Poll(*p->server_);
  }
  return p;
}

// fini() releases the connections too. Not for the counts (the teardown is
// the same in both runs and cancels in their difference) but for what a
// context leaves behind otherwise: libfabric's shm provider unlinks its
// /dev/shm region only when the endpoint is closed.
AbiPair::~AbiPair() {
  vt_->close_listener(listener_);
  for (Side* s : {client_.get(), server_.get()}) vt_->fini(s->ctx);
}

void AbiPair::Poll(Side& s) {
  ferry_progress_args_t a{};
  a.struct_size = sizeof a;
  a.max_events = 16;
  a.events = s.ev;
  a.event_stride = sizeof(ferry_event_t);
  if (vt_->progress(s.ctx, &a) != FERRY_OK) Die("progress() failed");
  for (uint32_t i = 0; i < a.num_events; ++i) {
    const ferry_event_t& e = s.ev[i];
    if (e.status != FERRY_OK) Die(e.message);
    switch (e.type) {
      case FERRY_EV_ACCEPTED:
        s.conn = e.conn;
        break;
      case FERRY_EV_CONNECTED:
        s.connected = true;
        break;
      case FERRY_EV_SEND_DONE:
        ++s.sends_done;
        break;
      case FERRY_EV_ARRIVAL:
        if (e.num_segments != 1 || e.segments[0].inline_data == nullptr) {
          Die("expected one inline segment");
        }
        s.have_arrival = true;
        s.msg_id = e.msg_id;
        s.inline_data = e.segments[0].inline_data;
        s.length = e.segments[0].length;
        break;
      default:
        break;
    }
  }
  if (a.num_events == 0 && !s.busy) {
    pollfd p{s.wakeup_fd, POLLIN, 0};
    (void)poll(&p, 1, 0);
  }
}

void AbiPair::Send(Side& s, const char* data) {
  const uint64_t header[2] = {1, 64};
  ferry_segment_t seg{};
  seg.struct_size = sizeof seg;
  seg.data = data;
  seg.length = 64;
  seg.device = ferry_device_t{FERRY_DEVICE_CPU, 0};
  ferry_send_args_t a{};
  a.struct_size = sizeof a;
  a.num_segments = 1;
  a.header = header;
  a.header_len = sizeof header;
  a.segments = &seg;
  a.segment_stride = sizeof seg;
  if (vt_->send(s.conn, &a, nullptr) != FERRY_OK) Die("send() failed");
  ++s.sends_posted;
}

void AbiPair::Consume(Side& s) {
  std::memcpy(recv_buf_, s.inline_data, s.length);
  if (vt_->discard(s.conn, s.msg_id, nullptr) != FERRY_OK) Die("discard() failed");
  s.have_arrival = false;
}

void AbiPair::RoundTrips(long n, int idle) {
  Side& client = *client_;
  Side& server = *server_;
  for (long i = 0; i < n; ++i) {
    Send(client, send_buf_);
    while (!server.have_arrival) Poll(server);
    while (server.sends_done < server.sends_posted) Poll(server);
    Consume(server);
    Send(server, recv_buf_);
    while (!client.have_arrival) Poll(client);
    Consume(client);
    while (client.sends_done < client.sends_posted) Poll(client);
    for (int k = 0; k < idle; ++k) {
      Poll(client);
      Poll(server);
    }
  }
}

}  // namespace ferry::bench
