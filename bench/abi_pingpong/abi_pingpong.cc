// ferry-bench-abi-pingpong: a deterministic ping-pong through a transport
// plugin's C ABI in ONE thread, for counting instructions (callgrind), not
// for timing. Two contexts of the plugin in this process, a client and a
// server, connected over loopback; each round trip has the transport
// benchmark's message shape (a 16-byte header and one 64-byte segment, the
// inline arrival copied out and discard()ed, the round trip ending when the
// echo is in and its SEND_DONE seen). No ferry::Transport and no host loop:
// what callgrind counts under the plugin's entry points is the plugin's own
// work.
//
// Usage: ferry-bench-abi-pingpong PLUGIN.so BUSY(0|1) ROUND_TRIPS [IDLE]
//   IDLE: extra progress() calls per side per round trip that find nothing
//   (the busy-poll spin). Count the difference between two runs, e.g.
//     valgrind --tool=callgrind ferry-bench-abi-pingpong libferry-tcp.so 1 2000
//     valgrind --tool=callgrind ferry-bench-abi-pingpong libferry-tcp.so 1 12000
//   and divide by 10000, so that set-up and tear-down cancel
//   (callgrind_annotate --inclusive=yes gives each entry point's share).
// Plugin parameters come from the environment (FERRY_<PLUGIN>_<KEY>), as
// the core's host services would read them. Sleeping-mode contexts are
// never put to sleep (one thread drives both): poll() on the wakeup fd is
// called with a zero timeout so that its cost is in the count.
#include <ferry/transport.h>

#include <dlfcn.h>
#include <poll.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

namespace {

const ferry_transport_vtable_t* g_vt = nullptr;

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "ferry-bench-abi-pingpong: %s\n", what);
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

struct Side {
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

char g_send_buf[64];
char g_recv_buf[64];

void Poll(Side& s) {
  ferry_progress_args_t a{};
  a.struct_size = sizeof a;
  a.max_events = 16;
  a.events = s.ev;
  a.event_stride = sizeof(ferry_event_t);
  if (g_vt->progress(s.ctx, &a) != FERRY_OK) Die("progress() failed");
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

void Send(Side& s, const char* data) {
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
  if (g_vt->send(s.conn, &a, nullptr) != FERRY_OK) Die("send() failed");
  ++s.sends_posted;
}

void Consume(Side& s) {
  std::memcpy(g_recv_buf, s.inline_data, s.length);
  if (g_vt->discard(s.conn, s.msg_id, nullptr) != FERRY_OK) {
    Die("discard() failed");
  }
  s.have_arrival = false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: %s PLUGIN.so BUSY(0|1) ROUND_TRIPS [IDLE]\n", argv[0]);
    return 2;
  }
  const bool busy = std::atoi(argv[2]) != 0;
  const long round_trips = std::atol(argv[3]);
  const int idle = argc > 4 ? std::atoi(argv[4]) : 0;

  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) Die(dlerror());
  auto negotiate = reinterpret_cast<ferry_transport_negotiate_fn>(
      dlsym(lib, FERRY_TRANSPORT_ENTRY_SYMBOL));
  if (negotiate == nullptr) Die("no entry point");
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
  if (negotiate(&na) != FERRY_OK) Die("negotiation failed");
  g_vt = na.vtable;

  Side client, server;
  ferry_init_args_t init{};
  init.struct_size = sizeof init;
  init.flags = busy ? FERRY_INIT_BUSY_POLL : 0;
  for (Side* s : {&client, &server}) {
    s->busy = busy;
    if (g_vt->init(&init, &s->ctx, nullptr) != FERRY_OK) Die("init() failed");
    ferry_context_info_t info{};
    info.struct_size = sizeof info;
    g_vt->query(s->ctx, &info);
    s->wakeup_fd = info.wakeup_fd;
  }
  ferry_listen_args_t la{};
  la.struct_size = sizeof la;
  la.address = "";
  ferry_listener_t* listener = nullptr;
  if (g_vt->listen(server.ctx, &la, &listener, nullptr) != FERRY_OK) {
    Die("listen() failed");
  }
  char address[256];
  g_vt->listener_address(listener, address, sizeof address);
  ferry_connect_args_t ca{};
  ca.struct_size = sizeof ca;
  ca.address = address;
  if (g_vt->connect(client.ctx, &ca, &client.conn, nullptr) != FERRY_OK) {
    Die("connect() failed");
  }
  while (!client.connected || server.conn == nullptr) {
    Poll(client);
    Poll(server);
  }

  for (long i = 0; i < round_trips; ++i) {
    Send(client, g_send_buf);
    while (!server.have_arrival) Poll(server);
    while (server.sends_done < server.sends_posted) Poll(server);
    Consume(server);
    Send(server, g_recv_buf);
    while (!client.have_arrival) Poll(client);
    Consume(client);
    while (client.sends_done < client.sends_posted) Poll(client);
    for (int k = 0; k < idle; ++k) {
      Poll(client);
      Poll(server);
    }
  }
  std::printf("%ld round trips\n", round_trips);
  // fini() releases the connections too. Not for the counts (the teardown
  // is the same in both runs and cancels in their difference) but for what
  // a context leaves behind otherwise: libfabric's shm provider unlinks its
  // /dev/shm region only when the endpoint is closed.
  g_vt->close_listener(listener);
  for (Side* s : {&client, &server}) g_vt->fini(s->ctx);
  return 0;
}
