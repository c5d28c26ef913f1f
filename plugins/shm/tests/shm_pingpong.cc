// A quick two-process ping-pong over libferry-shm.so beside raw shared-memory
// floors, for the plugin's own measurements (bench/ has the real benchmark).
// The peer is this binary exec'ed again (posix_spawn of /proc/self/exe, not a
// fork); each process pins itself to its own CPU.
//
//   shm_pingpong [--mode busy|sleep] [--sizes 64,4096,1048576,67108864]
//                [--iters N] [--cpus 0,1] [--cma 0|1] [--no-raw] [--via-core]
//
// A round trip is what a caller reusing its buffers waits for: send, the
// echo's arrival placed (or copied, when inline), and the send's SEND_DONE.
#include "raw_floor.h"
#include "shm_test_support.h"

#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

using namespace ferry_shm_test;

namespace {

struct Options {
  bool busy = true;
  std::vector<uint64_t> sizes = {64, 4096, 65536, 1u << 20, 64u << 20};
  int iters = 0;  // 0: by size
  int cpu_a = 0, cpu_b = 1;
  int cma = -1;  // -1: plugin default
  bool raw = true;
};

void Pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  if (sched_setaffinity(0, sizeof s, &s) != 0) std::perror("sched_setaffinity");
}

int ItersFor(uint64_t size, int forced) {
  if (forced > 0) return forced;
  if (size <= 4096) return 20000;
  if (size <= 65536) return 5000;
  if (size <= (1u << 20)) return 500;
  return 20;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Calls the plugin's vtable directly, or through ferry::Transport (the
// core's guarded wrapper, as bench/ does) with --via-core.
bool g_via_core = false;

// One side of the ping-pong. It calls progress() itself and keeps only
// counters, so the driver adds no allocation or copying per message to what
// it measures. In sleep mode it waits on the wakeup fd after an empty call.
class Side {
 public:
  Side(Endpoint* ep, bool busy)
      : ep_(ep),
        t_(&ep->t()),
        vt_(ep->t().plugin().vtable()),
        ctx_(ep->t().context()),
        busy_(busy) {}

  bool Poll() {
    uint32_t n = 0;
    if (g_via_core) {
      if (!t_->Progress(ev_, 16, &n).ok()) return false;
    } else {
      ferry_progress_args_t a{};
      a.struct_size = sizeof a;
      a.max_events = 16;
      a.events = ev_;
      a.event_stride = sizeof(ferry_event_t);
      if (vt_->progress(ctx_, &a) != FERRY_OK) return false;
      n = a.num_events;
    }
    for (uint32_t i = 0; i < n; ++i) {
      const ferry_event_t& e = ev_[i];
      switch (e.type) {
        case FERRY_EV_SEND_DONE:
          ++sends_done_;
          ok_ &= e.status == FERRY_OK;
          break;
        case FERRY_EV_PLACE_DONE:
          ++places_done_;
          ok_ &= e.status == FERRY_OK;
          break;
        case FERRY_EV_ARRIVAL:
          has_arrival_ = true;
          arrival_id_ = e.msg_id;
          arrival_inline_ = e.num_segments ? e.segments[0].inline_data : nullptr;
          arrival_len_ = e.num_segments ? e.segments[0].length : 0;
          break;
        case FERRY_EV_CONNECTED:
        case FERRY_EV_ACCEPTED:
          conn_ = e.conn;
          ok_ &= e.status == FERRY_OK;
          break;
        case FERRY_EV_CONN_BROKEN:
          if (closing_) break;  // the peer closed first: expected at the end
          std::fprintf(stderr, "connection broken: %s\n", e.message ? e.message : "");
          ok_ = false;
          break;
        case FERRY_EV_CLOSED:
          closed_ = true;
          break;
      }
    }
    if (n == 0 && !busy_) {
      pollfd p{ep_->wakeup_fd(), POLLIN, 0};
      poll(&p, 1, 1000);
    }
    return ok_;
  }
  template <typename F>
  bool Until(F done) {
    while (!done()) {
      if (!Poll()) return false;
    }
    return true;
  }
  // Receives one message into `buf` (copied when inline, else placed).
  bool Receive(std::vector<unsigned char>* buf) {
    if (!Until([&] { return has_arrival_; })) return false;
    has_arrival_ = false;
    if (arrival_inline_ != nullptr || arrival_len_ == 0) {
      if (arrival_len_) std::memcpy(buf->data(), arrival_inline_, arrival_len_);
      return g_via_core ? t_->Discard(conn_, arrival_id_).ok()
                        : vt_->discard(conn_, arrival_id_, nullptr) == FERRY_OK;
    }
    ferry_place_dest_t d{};
    d.struct_size = sizeof d;
    d.data = buf->data();
    d.capacity = arrival_len_;
    d.device = {FERRY_DEVICE_CPU, 0};
    ferry_place_args_t a{};
    a.struct_size = sizeof a;
    a.num_dests = 1;
    a.msg_id = arrival_id_;
    a.dests = &d;
    a.dest_stride = sizeof d;
    const uint64_t want = places_done_ + 1;
    const bool ok = g_via_core ? t_->Place(conn_, a).ok()
                               : vt_->place(conn_, &a, nullptr) == FERRY_OK;
    return ok && Until([&] { return places_done_ >= want; });
  }
  bool Send(const std::vector<unsigned char>& buf, uint64_t size) {
    const char header[16] = "ping";
    ferry_segment_t seg{};
    seg.struct_size = sizeof seg;
    seg.data = buf.data();
    seg.length = size;
    seg.device = {FERRY_DEVICE_CPU, 0};
    ferry_send_args_t a{};
    a.struct_size = sizeof a;
    a.num_segments = 1;
    a.header = header;
    a.header_len = sizeof header;
    a.segments = &seg;
    a.segment_stride = sizeof seg;
    for (;;) {
      const ferry_status_t rc =
          g_via_core ? t_->Send(conn_, a).code() : vt_->send(conn_, &a, nullptr);
      if (rc == FERRY_OK) {
        ++sends_posted_;
        return true;
      }
      if (rc != FERRY_UNAVAILABLE || !Poll()) return false;
    }
  }
  bool SendsDone() {
    return Until([&] { return sends_done_ == sends_posted_; });
  }

  Endpoint* ep_;
  ferry::Transport* t_;
  const ferry_transport_vtable_t* vt_;
  ferry_context_t* ctx_;
  bool busy_;
  ferry_event_t ev_[16];
  ferry_conn_t* conn_ = nullptr;
  bool ok_ = true, closed_ = false, has_arrival_ = false, closing_ = false;
  uint64_t arrival_id_ = 0, arrival_len_ = 0;
  const void* arrival_inline_ = nullptr;
  uint64_t sends_posted_ = 0, sends_done_ = 0, places_done_ = 0;
};

int RunPeer(const std::string& addr, bool busy, const std::vector<uint64_t>& sizes,
            const std::vector<int>& iters) {
  auto ep = Endpoint::Open(busy ? FERRY_INIT_BUSY_POLL : 0);
  if (!ep) return 1;
  Side side(ep.get(), busy);
  ferry_conn_t* conn = ep->Connect(addr);
  if (!side.Until([&] { return side.conn_ != nullptr; })) return 1;
  const uint64_t max = *std::max_element(sizes.begin(), sizes.end());
  std::vector<unsigned char> buf(max);
  for (size_t s = 0; s < sizes.size(); ++s) {
    for (int i = 0; i < iters[s]; ++i) {
      // buf is lent to the previous echo until its SEND_DONE.
      if (!side.Receive(&buf) || !side.SendsDone() || !side.Send(buf, sizes[s])) return 1;
    }
  }
  if (!side.SendsDone()) return 1;
  side.closing_ = true;
  ep->t().Close(conn);
  side.Until([&] { return side.closed_; });
  return 0;
}

std::string Join(const std::vector<uint64_t>& v) {
  std::string s;
  for (uint64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

std::vector<uint64_t> ParseSizes(const std::string& s) {
  std::vector<uint64_t> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t comma = s.find(',', pos);
    out.push_back(std::strtoull(s.substr(pos, comma - pos).c_str(), nullptr, 0));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string peer_addr, raw_fd;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--mode")
      o.busy = next() != "sleep";
    else if (a == "--sizes")
      o.sizes = ParseSizes(next());
    else if (a == "--iters")
      o.iters = std::atoi(next().c_str());
    else if (a == "--cpus") {
      std::string c = next();
      o.cpu_a = std::atoi(c.c_str());
      o.cpu_b = std::atoi(c.substr(c.find(',') + 1).c_str());
    } else if (a == "--cma")
      o.cma = std::atoi(next().c_str());
    else if (a == "--no-raw")
      o.raw = false;
    else if (a == "--via-core")
      g_via_core = true;
    else if (a == "--peer")
      peer_addr = next();
    else if (a == "--raw-peer")
      raw_fd = next();
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  std::vector<int> iters;
  for (uint64_t s : o.sizes) iters.push_back(ItersFor(s, o.iters));
  if (!raw_fd.empty()) {
    Pin(o.cpu_b);
    int fd = std::atoi(raw_fd.c_str());
    void* region =
        mmap(nullptr, RawRegionSize(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    RawServe(region);
    return 0;
  }
  if (!peer_addr.empty()) {
    Pin(o.cpu_b);
    return RunPeer(peer_addr, o.busy, o.sizes, iters);
  }

  Pin(o.cpu_a);
  const std::string self = "/proc/self/exe";
  std::vector<std::string> common = {
      "--mode",  o.busy ? "busy" : "sleep",
      "--sizes", Join(o.sizes),
      "--cpus",  std::to_string(o.cpu_a) + "," + std::to_string(o.cpu_b)};
  if (o.iters > 0) common.insert(common.end(), {"--iters", std::to_string(o.iters)});
  if (g_via_core) common.push_back("--via-core");
  std::vector<std::string> env;
  if (o.cma >= 0) {
    ferry::SetPluginParam("shm", "cma", std::to_string(o.cma));
    env.push_back("FERRY_SHM_CMA=" + std::to_string(o.cma));
  }

  // Raw floors first.
  std::vector<double> raw_median(o.sizes.size(), 0);
  if (o.raw) {
    int fd = memfd_create("raw-floor", 0);  // inherited by the peer
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(RawRegionSize())) != 0) return 1;
    void* region =
        mmap(nullptr, RawRegionSize(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    std::vector<std::string> args = common;
    args.insert(args.end(), {"--raw-peer", std::to_string(fd)});
    auto child = Child::Spawn(self, args);
    for (size_t s = 0; s < o.sizes.size(); ++s) {
      RawPingPong(region, o.sizes[s], std::max(1, iters[s] / 10));  // warm up
      raw_median[s] = Median(RawPingPong(region, o.sizes[s], iters[s]));
    }
    RawStop(region);
    child->Wait();
    munmap(region, RawRegionSize());
    close(fd);
  }

  auto ep = Endpoint::Open(o.busy ? FERRY_INIT_BUSY_POLL : 0);
  if (!ep) return 1;
  Side side(ep.get(), o.busy);
  ferry_listener_t* l = nullptr;
  std::string addr = ep->Listen(&l);
  std::vector<std::string> args = common;
  args.insert(args.end(), {"--peer", addr});
  auto child = Child::Spawn(self, args, env);
  if (!side.Until([&] { return side.conn_ != nullptr; })) return 1;
  ferry_conn_t* conn = side.conn_;
  auto pa = ep->t().PeerAddress(conn);
  std::printf("shm ping-pong, %s mode, CPUs %d and %d, calls %s, %s\n",
              o.busy ? "busy-poll" : "sleep", o.cpu_a, o.cpu_b,
              g_via_core ? "through ferry::Transport" : "straight to the vtable",
              pa.ok() ? pa.value().c_str() : "?");
  std::printf("%10s %8s %12s %12s %12s %10s %12s %8s\n", "size", "iters", "rtt_med_us",
              "rtt_mean_us", "raw_med_us", "vs_raw", "MB/s", "bw_ratio");
  const uint64_t max = *std::max_element(o.sizes.begin(), o.sizes.end());
  std::vector<unsigned char> out(max, 0x42), in(max);
  for (size_t s = 0; s < o.sizes.size(); ++s) {
    const uint64_t size = o.sizes[s];
    std::vector<double> rtt;
    rtt.reserve(static_cast<size_t>(iters[s]));
    for (int i = 0; i < iters[s]; ++i) {
      const auto t0 = Clock::now();
      if (!side.Send(out, size) || !side.Receive(&in) || !side.SendsDone()) {
        std::fprintf(stderr, "round trip failed at size %llu\n",
                     (unsigned long long)size);
        return 1;
      }
      rtt.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count());
    }
    // The first tenth warms up (page faults, caches): not counted.
    rtt.erase(rtt.begin(), rtt.begin() + rtt.size() / 10);
    const double med = Median(rtt);
    const double mean = std::accumulate(rtt.begin(), rtt.end(), 0.0) / rtt.size();
    const double mbs = size / (med / 2) * 1e3;
    const double raw_mbs = raw_median[s] > 0 ? size / (raw_median[s] / 2) * 1e3 : 0;
    std::printf("%10llu %8d %12.3f %12.3f %12.3f %10.2f %12.1f %8.2f\n",
                (unsigned long long)size, iters[s], med / 1e3, mean / 1e3,
                raw_median[s] / 1e3, raw_median[s] > 0 ? med / raw_median[s] : 0.0, mbs,
                raw_mbs > 0 ? mbs / raw_mbs : 0.0);
  }
  side.closing_ = true;
  ep->t().Close(conn);
  side.Until([&] { return side.closed_; });
  ep->t().CloseListener(l);
  return child->Wait() == 0 ? 0 : 1;
}
