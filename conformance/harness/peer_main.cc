// The hidden `--peer MODE` side of ferry-conformance: a second process that
// loads the plugin through the production loader and plays the remote end.
// It is deliberately a plain loop, not a gtest: it reports over the control
// channel ("ready", "sent", "error <text>") and by its exit code, and the
// test in the parent decides what is a failure.
//
// Modes:
//   stall        connect, say "ready", then never progress again (a peer
//                whose process is alive but reads nothing) until killed.
//   send-big     connect, post a 64 MiB send and eight 1 MiB sends, say
//                "ready", progress until killed.
//   send-on-cue  connect, say "ready", wait for "send", send one message,
//                say "sent" once SEND_DONE, progress until the channel
//                closes, close and exit.
//   echo         connect, say "ready", send every arriving message back
//                unchanged (same header and segments), until the channel
//                closes; then close and exit 0.
//   device-*     the DEV-* receiver (harness/device_peer.cc), in builds
//                with the CUDA toolkit's headers.
#include "harness/peer_process.h"
#include "harness/util.h"
#include "loader/plugin_loader.h"
#include "transport/transport.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ferry::conformance {
namespace {

struct PeerArgs {
  std::string mode, plugin, address;
  int fd = -1;
};

class Peer {
 public:
  explicit Peer(const PeerArgs& args) : args_(args) {}
  int Run();

 private:
  void Say(const std::string& line) {
    std::string l = line + "\n";
    (void)!write(args_.fd, l.data(), l.size());
  }
  int Fail(const std::string& why) {
    Say("error " + why);
    std::fprintf(stderr, "ferry-conformance peer (%s): %s\n", args_.mode.c_str(),
                 why.c_str());
    return 1;
  }
  // One progress() call; handles the events this peer cares about. Returns
  // the number of events, or -1 on a fatal error.
  int Pump();
  // Reads the channel without blocking: false once it is closed.
  bool ChannelOpen();
  // Blocks until the channel is readable or a wakeup fd is (bounded).
  void Idle();
  bool PumpUntil(const std::function<bool()>& done, milliseconds timeout);
  void* PostSend(const std::vector<unsigned char>& header,
                 const std::vector<std::vector<unsigned char>>& segments);
  void OnArrival(const ferry_event_t& e);

  PeerArgs args_;
  std::unique_ptr<Transport> t_;
  ferry_conn_t* conn_ = nullptr;
  bool connected_ = false, closed_ = false, broken_ = false;
  std::string channel_;
  bool channel_eof_ = false;
  uintptr_t next_cookie_ = 0x100;
  std::map<void*, ferry_status_t> done_;
  // Echo: messages being placed, then sent back; kept until SEND_DONE.
  struct Echo {
    std::vector<unsigned char> header;
    std::vector<std::vector<unsigned char>> segments;
    void* place_cookie = nullptr;
    void* send_cookie = nullptr;
  };
  std::deque<Echo> echoes_;
  std::string error_;
};

bool Peer::ChannelOpen() {
  char buf[256];
  while (!channel_eof_) {
    pollfd p{args_.fd, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) break;
    ssize_t n = read(args_.fd, buf, sizeof buf);
    if (n <= 0) {
      channel_eof_ = true;
    } else {
      channel_.append(buf, static_cast<size_t>(n));
    }
  }
  return !channel_eof_;
}

void Peer::Idle() {
  std::vector<pollfd> fds = {{args_.fd, POLLIN, 0}};
  if (t_->HasCap(FERRY_CAP_WAKEUP_FD) && t_->info().wakeup_fd >= 0 &&
      !t_->HasCap(FERRY_CAP_BUSY_POLL)) {
    fds.push_back({t_->info().wakeup_fd, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 10);
  }
}

void* Peer::PostSend(const std::vector<unsigned char>& header,
                     const std::vector<std::vector<unsigned char>>& segments) {
  std::vector<ferry_segment_t> segs(segments.size());
  for (size_t i = 0; i < segments.size(); ++i) {
    segs[i].struct_size = FERRY_SEGMENT_STRUCT_SIZE;
    segs[i].data = segments[i].data();
    segs[i].length = segments[i].size();
    segs[i].device = {FERRY_DEVICE_CPU, 0};
  }
  ferry_send_args_t args{};
  args.struct_size = FERRY_SEND_ARGS_STRUCT_SIZE;
  args.num_segments = static_cast<uint32_t>(segs.size());
  args.header = header.data();
  args.header_len = header.size();
  args.segments = segs.data();
  args.segment_stride = sizeof(ferry_segment_t);
  while (true) {
    void* cookie = reinterpret_cast<void*>(next_cookie_ += 16);
    args.user_data = cookie;
    Status s = t_->Send(conn_, args);
    if (s.ok()) return cookie;
    if (s.code() != FERRY_UNAVAILABLE) {
      error_ = "send: " + s.ToString();
      return nullptr;
    }
    if (Pump() < 0) return nullptr;
  }
}

void Peer::OnArrival(const ferry_event_t& e) {
  if (args_.mode != "echo") {
    t_->Discard(e.conn, e.msg_id);
    return;
  }
  Echo echo;
  echo.header.assign(static_cast<const unsigned char*>(e.header),
                     static_cast<const unsigned char*>(e.header) + e.header_len);
  std::vector<ferry_place_dest_t> dests(e.num_segments);
  bool all_inline = true;
  echo.segments.resize(e.num_segments);
  for (uint32_t i = 0; i < e.num_segments; ++i) {
    const ferry_arrival_segment_t* s =
        FERRY_ELEMENT_AT(const ferry_arrival_segment_t, e.segments, e.segment_stride, i);
    echo.segments[i].resize(s->length);
    dests[i].struct_size = FERRY_PLACE_DEST_STRUCT_SIZE;
    dests[i].device = {FERRY_DEVICE_CPU, 0};
    if (s->inline_data != nullptr) {
      if (s->length > 0) std::memcpy(echo.segments[i].data(), s->inline_data, s->length);
    } else if (s->length > 0) {
      all_inline = false;
      dests[i].data = echo.segments[i].data();
      dests[i].capacity = s->length;
    }
  }
  echoes_.push_back(std::move(echo));
  Echo& stored = echoes_.back();
  // Re-point the destinations at the stored (moved) buffers.
  for (uint32_t i = 0; i < e.num_segments; ++i) {
    if (dests[i].data != nullptr) dests[i].data = stored.segments[i].data();
  }
  if (all_inline) {
    t_->Discard(e.conn, e.msg_id);
    stored.send_cookie = PostSend(stored.header, stored.segments);
    return;
  }
  void* cookie = reinterpret_cast<void*>(next_cookie_ += 16);
  ferry_place_args_t pa{};
  pa.struct_size = FERRY_PLACE_ARGS_STRUCT_SIZE;
  pa.num_dests = e.num_segments;
  pa.msg_id = e.msg_id;
  pa.dests = dests.data();
  pa.dest_stride = sizeof(ferry_place_dest_t);
  pa.user_data = cookie;
  Status s = t_->Place(e.conn, pa);
  if (!s.ok()) {
    error_ = "place: " + s.ToString();
    return;
  }
  stored.place_cookie = cookie;
}

int Peer::Pump() {
  ferry_event_t events[16];
  uint32_t n = 0;
  Status s = t_->Progress(events, 16, &n);
  if (!s.ok()) {
    error_ = "progress: " + s.ToString();
    return -1;
  }
  for (uint32_t i = 0; i < n; ++i) {
    const ferry_event_t& e = events[i];
    switch (e.type) {
      case FERRY_EV_CONNECTED:
        connected_ = e.status == FERRY_OK;
        if (!connected_)
          error_ = std::string("connect failed: ") + (e.message ? e.message : "");
        break;
      case FERRY_EV_SEND_DONE:
        done_[e.user_data] = e.status;
        break;
      case FERRY_EV_PLACE_DONE:
        for (Echo& echo : echoes_) {
          if (echo.place_cookie == e.user_data) {
            echo.send_cookie = PostSend(echo.header, echo.segments);
          }
        }
        break;
      case FERRY_EV_ARRIVAL:
        OnArrival(e);
        break;
      case FERRY_EV_CONN_BROKEN:
        broken_ = true;
        break;
      case FERRY_EV_CLOSED:
        closed_ = true;
        break;
      default:
        break;
    }
  }
  // Echoes whose send completed are finished.
  while (!echoes_.empty() && echoes_.front().send_cookie != nullptr &&
         done_.count(echoes_.front().send_cookie) > 0) {
    done_.erase(echoes_.front().send_cookie);
    echoes_.pop_front();
  }
  return error_.empty() ? static_cast<int>(n) : -1;
}

bool Peer::PumpUntil(const std::function<bool()>& done, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    int n = Pump();
    if (n < 0) return false;
    if (n == 0) Idle();
  }
  return true;
}

int Peer::Run() {
  PluginLoader loader;
  auto plugin = loader.Load(args_.plugin);
  if (!plugin.ok())
    return Fail("load " + args_.plugin + ": " + plugin.status().ToString());
  auto transport = Transport::Open(plugin.value(), 0, "conformance-peer");
  if (!transport.ok()) return Fail("init: " + transport.status().ToString());
  t_ = std::move(transport.value());

  Status s = t_->Connect(args_.address, reinterpret_cast<void*>(0x10), &conn_);
  if (!s.ok()) return Fail("connect " + args_.address + ": " + s.ToString());
  if (!PumpUntil([&] { return connected_; }, kOpTimeout)) {
    return Fail("no CONNECTED within 10 s: " + error_);
  }

  if (args_.mode == "stall") {
    Say("ready");
    // Never progress again: block on the channel until the parent kills us
    // or closes it.
    char c;
    while (read(args_.fd, &c, 1) > 0) {
    }
    return 0;
  }

  if (args_.mode == "send-big") {
    // Buffers stay alive until the process dies: they are borrowed by the
    // plugin until SEND_DONE, which the parent's SIGKILL pre-empts.
    std::vector<unsigned char> header(16, 0x42);
    std::vector<std::vector<std::vector<unsigned char>>> messages(9);
    messages[0].emplace_back(64 * kMiB);
    FillPattern(messages[0][0].data(), messages[0][0].size(), 64);
    for (int i = 1; i < 9; ++i) messages[i].emplace_back(kMiB, 7);
    for (const auto& m : messages) {
      if (PostSend(header, m) == nullptr) return Fail(error_);
    }
    Say("ready");
    while (ChannelOpen()) {
      if (Pump() == 0) Idle();
    }
    return 0;
  }

  if (args_.mode == "send-on-cue") {
    Say("ready");
    while (true) {
      if (!ChannelOpen()) return 0;
      if (channel_.find("send\n") != std::string::npos) break;
      pollfd p{args_.fd, POLLIN, 0};
      ::poll(&p, 1, 1000);  // blocks on the channel: we must not progress
    }
    std::vector<unsigned char> header = {'w', 'a', 'k', 'e'};
    std::vector<std::vector<unsigned char>> payload(1, std::vector<unsigned char>(100));
    FillPattern(payload[0].data(), payload[0].size(), 100);
    void* cookie = PostSend(header, payload);
    if (cookie == nullptr) return Fail(error_);
    if (!PumpUntil([&] { return done_.count(cookie) > 0; }, kOpTimeout)) {
      return Fail("no SEND_DONE within 10 s " + error_);
    }
    Say("sent");
  } else if (args_.mode == "echo") {
    Say("ready");
  } else {
    return Fail("unknown peer mode '" + args_.mode + "'");
  }

  while (ChannelOpen()) {
    int n = Pump();
    if (n < 0) return Fail(error_);
    if (n == 0) Idle();
  }
  t_->Close(conn_);
  if (!PumpUntil([&] { return closed_; }, kOpTimeout)) {
    return Fail("no CLOSED within 10 s after close()");
  }
  return 0;
}

}  // namespace

int RunPeer(int argc, char** argv) {
  PeerArgs args;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string key = argv[i];
    std::string value = argv[i + 1];
    if (key == "--peer")
      args.mode = value;
    else if (key == "--peer-plugin")
      args.plugin = value;
    else if (key == "--peer-address")
      args.address = value;
    else if (key == "--peer-fd")
      args.fd = std::atoi(value.c_str());
  }
  if (args.fd < 0 || args.mode.empty() || args.plugin.empty()) {
    std::fprintf(stderr,
                 "ferry-conformance: --peer is internal (used by the "
                 "suite to start peer processes)\n");
    return 2;
  }
  // Die with the parent even if it is killed before it can close the channel.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) return 3;
  signal(SIGPIPE, SIG_IGN);
  if (args.mode.rfind("device-", 0) == 0) {
#ifdef FERRY_CONFORMANCE_DEVICE
    return RunDevicePeer(args.mode, args.plugin, args.address, args.fd);
#else
    const std::string line =
        "error this ferry-conformance was built without the CUDA toolkit\n";
    (void)!write(args.fd, line.data(), line.size());
    return 1;
#endif
  }
  Peer peer(args);
  return peer.Run();
}

}  // namespace ferry::conformance
