// The device peer (`--peer device-receive`): the receiving process of the
// DEV-* requirements. CUDA IPC refuses a handle opened in the process that
// exported it, so device segments are only proven between two processes:
// the test sends, this process receives.
//
// It connects, says "ready", and answers every arrival with place(): each
// segment into device memory (the plugin's mem_alloc, poisoned first) or
// host memory, as the message header asks. Once PLACE_DONE is returned it
// reads the bytes back (the plugin's mem_copy) and checks them against the
// header's description, then says "ok <n>" or "bad <n> <what differs>".
// The header is text: "<n> <seg> <seg> ...", one word per segment, each a
// placement ('d' device, 'h' host) and a check (harness/device.h,
// CheckBytes): "3 dp301 hc5a000010".
//
// Cue "stall": say "stalled", then never progress again (a receiver that
// holds its handles open and is then killed, DEV-5). Channel closed: close
// the connection and exit 0.
#include "harness/device.h"
#include "harness/peer_process.h"
#include "harness/util.h"
#include "loader/plugin_loader.h"
#include "testkit/event.h"
#include "transport/transport.h"

#include <poll.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace ferry::conformance {
namespace {

struct SegmentCheck {
  char place = 'h';  // 'd' device, 'h' host
  char kind = 'p';   // CheckBytes kinds
  uint64_t value = 0;
};

bool ParseHeader(const std::string& header, std::string* n,
                 std::vector<SegmentCheck>* checks) {
  std::istringstream words(header);
  if (!(words >> *n)) return false;
  std::string w;
  while (words >> w) {
    if (w.size() < 3 || (w[0] != 'd' && w[0] != 'h') || (w[1] != 'p' && w[1] != 'c')) {
      return false;
    }
    SegmentCheck c;
    c.place = w[0];
    c.kind = w[1];
    c.value = std::strtoull(w.c_str() + 2, nullptr, w[1] == 'c' ? 16 : 10);
    checks->push_back(c);
  }
  return true;
}

class DevicePeer {
 public:
  DevicePeer(std::string plugin, std::string address, int fd)
      : plugin_(std::move(plugin)), address_(std::move(address)), fd_(fd) {}
  int Run();

 private:
  struct Pending {
    std::string n;
    std::vector<SegmentCheck> checks;
    std::vector<uint64_t> lengths;
    std::vector<std::vector<unsigned char>> host;  // host dests, inline copies
    std::vector<bool> is_inline;
    std::vector<std::unique_ptr<DeviceBuffer>> device;
  };

  void Say(const std::string& line) {
    std::string l = line + "\n";
    (void)!write(fd_, l.data(), l.size());
  }
  int Fail(const std::string& why) {
    Say("error " + why);
    std::fprintf(stderr, "ferry-conformance device peer: %s\n", why.c_str());
    return 1;
  }
  // Reads what the parent wrote; false once the channel is closed.
  bool ReadChannel();
  int Pump();
  void OnArrival(const testkit::EventView& e);
  void OnPlaced(void* cookie, ferry_status_t status, const std::string& message);
  void Idle();

  std::string plugin_, address_;
  int fd_;
  std::unique_ptr<Transport> t_;
  std::unique_ptr<MemoryServices> mem_;
  ferry_conn_t* conn_ = nullptr;
  bool connected_ = false, closed_ = false;
  std::string connect_error_;
  std::string channel_;
  bool channel_eof_ = false;
  uintptr_t next_cookie_ = 0x1000;
  std::map<void*, Pending> pending_;
};

bool DevicePeer::ReadChannel() {
  char buf[256];
  while (!channel_eof_) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) break;
    ssize_t n = read(fd_, buf, sizeof buf);
    if (n <= 0) {
      channel_eof_ = true;
    } else {
      channel_.append(buf, static_cast<size_t>(n));
    }
  }
  return !channel_eof_;
}

void DevicePeer::Idle() {
  if (t_->HasCap(FERRY_CAP_WAKEUP_FD) && !t_->HasCap(FERRY_CAP_BUSY_POLL) &&
      t_->info().wakeup_fd >= 0) {
    pollfd fds[2] = {{fd_, POLLIN, 0}, {t_->info().wakeup_fd, POLLIN, 0}};
    ::poll(fds, 2, 5);
  } else {
    std::this_thread::yield();
  }
}

void DevicePeer::OnArrival(const testkit::EventView& e) {
  Pending p;
  std::string header(static_cast<const char*>(e.header),
                     static_cast<size_t>(e.header_len));
  if (!ParseHeader(header, &p.n, &p.checks) || p.checks.size() != e.segments.size()) {
    Say("bad ? header '" + header + "' does not describe the " +
        std::to_string(e.segments.size()) + " segments that arrived");
    t_->Discard(e.conn, e.msg_id);
    return;
  }
  const size_t count = e.segments.size();
  p.lengths.resize(count);
  p.host.resize(count);
  p.is_inline.resize(count);
  p.device.resize(count);
  std::vector<ferry_place_dest_t> dests(count);
  for (size_t i = 0; i < count; ++i) {
    const testkit::SegmentView& s = e.segments[i];
    ferry_place_dest_t& d = dests[i];
    d.struct_size = FERRY_PLACE_DEST_STRUCT_SIZE;
    d.device = kHostDevice;
    p.lengths[i] = s.length;
    if (s.inline_data != nullptr) {
      // The host copies inline bytes itself (into device memory too).
      p.is_inline[i] = true;
      const auto* b = static_cast<const unsigned char*>(s.inline_data);
      p.host[i].assign(b, b + s.length);
      continue;
    }
    if (s.length == 0) continue;
    if (p.checks[i].place == 'd') {
      std::string error;
      p.device[i] = DeviceBuffer::Allocate(mem_.get(), s.length,
                                           DeviceBuffer::From::kPlugin, &error);
      if (!p.device[i]) {
        Say("bad " + p.n + " receive buffer: " + error);
        t_->Discard(e.conn, e.msg_id);
        return;
      }
      // Poisoned and settled before the plugin writes: stale bytes show.
      const ferry_cuda::Driver* cu = CurrentGpu(&error);
      if (cu == nullptr ||
          !(error = CuError(cu->cuMemsetD8(DevPtr(p.device[i]->data()), 0xEE, s.length),
                            "cuMemsetD8"))
               .empty() ||
          !(error = CuError(cu->cuStreamSynchronize(nullptr), "cuStreamSynchronize"))
               .empty()) {
        Say("bad " + p.n + " poisoning the receive buffer: " + error);
        t_->Discard(e.conn, e.msg_id);
        return;
      }
      d.data = p.device[i]->data();
      d.capacity = s.length;
      d.device = kCuda0;
    } else {
      p.host[i].assign(s.length, 0xEE);
      d.data = p.host[i].data();
      d.capacity = s.length;
    }
  }
  void* cookie = reinterpret_cast<void*>(next_cookie_ += 16);
  ferry_place_args_t args{};
  args.struct_size = FERRY_PLACE_ARGS_STRUCT_SIZE;
  args.num_dests = static_cast<uint32_t>(count);
  args.msg_id = e.msg_id;
  args.dests = dests.data();
  args.dest_stride = sizeof(ferry_place_dest_t);
  args.user_data = cookie;
  // Host vectors keep their buffers when the Pending moves into the map.
  auto it = pending_.emplace(cookie, std::move(p)).first;
  Status s = t_->Place(e.conn, args);
  if (!s.ok()) {
    Say("bad " + it->second.n + " place() refused: " + s.ToString());
    pending_.erase(it);
  }
}

void DevicePeer::OnPlaced(void* cookie, ferry_status_t status,
                          const std::string& message) {
  auto it = pending_.find(cookie);
  if (it == pending_.end()) return;
  Pending& p = it->second;
  std::string verdict = "ok " + p.n;
  if (status != FERRY_OK) {
    verdict =
        "bad " + p.n + " PLACE_DONE with " + testkit::StatusText(status) + ": " + message;
  }
  for (size_t i = 0; status == FERRY_OK && i < p.checks.size(); ++i) {
    std::vector<unsigned char> device_copy;
    const unsigned char* bytes = p.host[i].data();
    if (p.device[i]) {
      device_copy.resize(p.lengths[i]);
      std::string error =
          ToHost(*mem_, device_copy.data(), p.device[i]->data(), p.lengths[i]);
      if (!error.empty()) {
        verdict =
            "bad " + p.n + " reading segment " + std::to_string(i) + " back: " + error;
        break;
      }
      bytes = device_copy.data();
    }
    std::string diff =
        CheckBytes(bytes, p.lengths[i], p.checks[i].kind, p.checks[i].value);
    if (!diff.empty()) {
      verdict = "bad " + p.n + " segment " + std::to_string(i) + " (" +
                Bytes(p.lengths[i]) +
                (p.is_inline[i]             ? ", arrived inline"
                 : p.checks[i].place == 'd' ? ", placed in device memory"
                                            : ", placed in host memory") +
                ") " + diff;
      break;
    }
  }
  pending_.erase(it);  // frees the receive buffers
  Say(verdict);
}

int DevicePeer::Pump() {
  ferry_event_t events[16];
  uint32_t n = 0;
  Status s = t_->Progress(events, 16, &n);
  if (!s.ok()) return -1;
  for (uint32_t i = 0; i < n; ++i) {
    testkit::EventView e = testkit::ReadEvent(events[i]);
    switch (e.type) {
      case FERRY_EV_CONNECTED:
        connected_ = e.status == FERRY_OK;
        if (!connected_) connect_error_ = testkit::Describe(e);
        break;
      case FERRY_EV_ARRIVAL:
        OnArrival(e);
        break;
      case FERRY_EV_PLACE_DONE:
        OnPlaced(e.user_data, e.status, e.message);
        break;
      case FERRY_EV_CLOSED:
        closed_ = true;
        break;
      default:
        break;
    }
  }
  return static_cast<int>(n);
}

int DevicePeer::Run() {
  std::string why;
  if (CurrentGpu(&why) == nullptr) return Fail("no GPU: " + why);
  PluginLoader loader;
  auto plugin = loader.Load(plugin_);
  if (!plugin.ok()) return Fail("load " + plugin_ + ": " + plugin.status().ToString());
  auto transport = Transport::Open(plugin.value(), 0, "conformance-device-peer");
  if (!transport.ok()) return Fail("init: " + transport.status().ToString());
  t_ = std::move(transport.value());
  mem_ = std::make_unique<MemoryServices>(t_.get());

  Status s = t_->Connect(address_, reinterpret_cast<void*>(0x10), &conn_);
  if (!s.ok()) return Fail("connect " + address_ + ": " + s.ToString());
  const auto deadline = Clock::now() + kOpTimeout;
  while (!connected_ && connect_error_.empty()) {
    if (Clock::now() >= deadline) return Fail("no CONNECTED within 10 s");
    if (Pump() < 0) return Fail("progress failed while connecting");
  }
  if (!connected_) return Fail("connect failed: " + connect_error_);
  Say("ready");

  while (ReadChannel()) {
    if (channel_.find("stall\n") != std::string::npos) {
      Say("stalled");
      // Never progress again; block until killed or the channel closes.
      char c;
      while (read(fd_, &c, 1) > 0) {
      }
      return 0;
    }
    int n = Pump();
    if (n < 0) return Fail("progress failed");
    if (n == 0) Idle();
  }
  t_->Close(conn_);
  const auto close_deadline = Clock::now() + kOpTimeout;
  while (!closed_ && Clock::now() < close_deadline) {
    if (Pump() == 0) Idle();
  }
  pending_.clear();
  return closed_ ? 0 : Fail("no CLOSED within 10 s after close()");
}

}  // namespace

int RunDevicePeer(const std::string& mode, const std::string& plugin,
                  const std::string& address, int fd) {
  if (mode != "device-receive") {
    std::string line = "error unknown device peer mode '" + mode + "'\n";
    (void)!write(fd, line.data(), line.size());
    return 1;
  }
  DevicePeer peer(plugin, address, fd);
  return peer.Run();
}

}  // namespace ferry::conformance
