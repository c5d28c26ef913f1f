// ferry-bench-rpc (`ferry bench rpc --transport tcp`): the core's costs over
// a transport, beside that transport's own ping-pong measured in the same
// run (ferry-bench-transport), so the core's overhead is a difference and a
// ratio, not a guess.
//
// Measures, per mode (busy-poll, then sleeping): no-op rpc_sync round trip
// (median, p99); rpc_async throughput with 1, 8 and 64 calls in flight;
// tensor echo 1 KiB .. 64 MiB; RRef create+delete (remote() + release,
// until the owner freed every value) amortized per RRef; and join time for
// 2 and 4 workers. Two processes pinned to different CPUs.
//
// The comparison runs in rounds (--rounds, default 5): each round measures
// the transport's ping-pong and then, with fresh workers, rpc_sync and RRef
// create+delete. On a shared VM the floor itself drifts by 20-30% within a
// minute; taking the difference inside each round and reporting the median
// of those differences keeps that drift out of the core's figure.
#include <ferry/ferry.hpp>

#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

void Pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu % std::max(1, static_cast<int>(std::thread::hardware_concurrency())), &set);
  sched_setaffinity(0, sizeof set, &set);
}

double Ns(Clock::duration d) {
  return static_cast<double>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

struct Summary {
  double median = 0, p99 = 0;
};
Summary Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  Summary s;
  if (v.empty()) return s;
  s.median = v[v.size() / 2];
  s.p99 = v[std::min(v.size() - 1, (v.size() * 99 + 99) / 100 - 1)];
  return s;
}

// A tensor over a caller-owned buffer: the deleter frees only the wrapper.
DLManagedTensor* View(void* data, int64_t bytes) {
  struct Box {
    DLManagedTensor t;
    int64_t shape[1];
  };
  auto* b = new Box();
  b->shape[0] = bytes;
  b->t.dl_tensor.data = data;
  b->t.dl_tensor.device = {kDLCPU, 0};
  b->t.dl_tensor.ndim = 1;
  b->t.dl_tensor.dtype = {kDLUInt, 8, 1};
  b->t.dl_tensor.shape = b->shape;
  b->t.manager_ctx = b;
  b->t.deleter = [](DLManagedTensor* self) {
    delete static_cast<Box*>(self->manager_ctx);
  };
  return &b->t;
}

int RunPeer(const std::string& store, const std::string& job,
            const std::string& transport, bool busy) {
  Pin(1);
  ferry::Worker::Options o;
  o.name = "peer";
  o.store = store;
  o.job = job;
  o.transport = transport;
  o.busy_poll = busy;
  ferry::Worker w(o);
  w.Register("noop", [](ferry::Call& c, ferry::Message) { c.Reply(); });
  w.Register("echo", [](ferry::Call& c, ferry::Message args) {
    ferry::Payload p;
    for (uint32_t i = 0; i < args.num_tensors(); ++i) p.Tensor(args.TakeTensor(i));
    c.Reply(std::move(p));
  });
  w.Register("value",
             [](ferry::Call& c, ferry::Message) { c.Reply(ferry::Payload("v")); });
  w.Register("owned", [&w](ferry::Call& c, ferry::Message) {
    c.Reply(ferry::Payload(std::to_string(w.Stats().owned_rrefs)));
  });
  char buf[16];
  while (read(0, buf, sizeof buf) > 0) {
  }
  w.Shutdown(1000ms);
  return 0;
}

struct Transport64 {
  double ferry_median = 0, raw_median = 0;
  bool ok = false;
};

// The transport's own 64-byte ping-pong, by ferry-bench-transport.
Transport64 TransportPingPong(const std::string& self_dir, const std::string& plugin,
                              bool busy, int iters) {
  Transport64 t;
  const std::string json =
      "/tmp/ferry-bench-rpc-transport-" + std::to_string(getpid()) + ".json";
  const std::string cmd = self_dir + "/ferry-bench-transport --plugin " + plugin +
                          " --sizes 64 --iters " + std::to_string(iters) + " --mode " +
                          (busy ? "busy" : "sleep") + " --json " + json +
                          " > /dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) return t;
  std::ifstream in(json);
  std::stringstream ss;
  ss << in.rdbuf();
  std::remove(json.c_str());
  const std::string s = ss.str();
  // Small and fixed schema: pick the numbers without a JSON dependency.
  auto number_after = [&](size_t from, const char* key) -> double {
    size_t k = s.find(key, from);
    if (k == std::string::npos) return 0;
    return std::strtod(s.c_str() + k + std::strlen(key), nullptr);
  };
  const size_t results = s.find("\"results\"");
  const size_t ferry = s.find("\"ferry\": {", results);
  const size_t raw = s.find("\"raw\": {", results);
  if (ferry == std::string::npos || raw == std::string::npos) return t;
  t.ferry_median = number_after(ferry, "\"median\": ");
  t.raw_median = number_after(raw, "\"median\": ");
  t.ok = t.ferry_median > 0;
  return t;
}

// A worker that hosts its job's store on a free loopback port.
ferry::Worker::Options StoreHostOptions(const std::string& name, const std::string& job,
                                        const std::string& transport) {
  ferry::Worker::Options o;
  o.name = name;
  o.job = job;
  o.transport = transport;
  o.store = "127.0.0.1:0";
  o.host_store = true;
  return o;
}

double JoinMs(int n, const std::string& transport) {
  const std::string job = "bench-join-" + std::to_string(getpid()) + "-" +
                          std::to_string(Clock::now().time_since_epoch().count());
  const ferry::Worker::Options o = StoreHostOptions("j0", job, transport);
  const auto t0 = Clock::now();
  ferry::Worker seed(o);
  std::vector<std::unique_ptr<ferry::Worker>> others(static_cast<size_t>(n - 1));
  std::vector<std::thread> threads;
  for (int i = 1; i < n; ++i) {
    threads.emplace_back([&, i] {
      ferry::Worker::Options oi = o;
      oi.name = "j" + std::to_string(i);
      oi.host_store = false;
      oi.store = seed.store_address();
      others[static_cast<size_t>(i - 1)] = std::make_unique<ferry::Worker>(oi);
    });
  }
  for (auto& t : threads) t.join();
  seed.WaitForWorkers(static_cast<uint32_t>(n), 10000ms);
  const double ms = Ns(Clock::now() - t0) / 1e6;
  return ms;
}

// A worker here (CPU 0) and a peer process (CPU 1) serving the benchmark's
// functions; the peer exits when the pipe to its stdin closes.
class Session {
 public:
  Session(const char* self, const std::string& transport, bool busy,
          const std::string& tag) {
    sched_getaffinity(0, sizeof start_cpus_, &start_cpus_);
    Pin(0);
    const std::string job = "bench-rpc-" + std::to_string(getpid()) + "-" + tag;
    ferry::Worker::Options o = StoreHostOptions("bench", job, transport);
    o.busy_poll = busy;
    me_ = std::make_unique<ferry::Worker>(o);
    int in[2];
    if (pipe(in) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_addclose(&fa, in[1]);
    std::vector<std::string> args = {
        self,          "--peer",  "--store", me_->store_address(), "--job", job,
        "--transport", transport, "--busy",  busy ? "1" : "0"};
    std::vector<char*> av;
    for (auto& a : args) av.push_back(a.data());
    av.push_back(nullptr);
    if (posix_spawn(&pid_, self, &fa, nullptr, av.data(), environ) != 0) {
      throw std::runtime_error("cannot start the peer process");
    }
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    to_peer_ = in[1];
    me_->WaitForWorkers(2, 20000ms);
  }
  ~Session() {
    close(to_peer_);
    waitpid(pid_, nullptr, 0);
    me_->Shutdown(1000ms);
    // ferry-bench-transport places its two processes within the affinity it
    // inherits: it must not inherit this session's single CPU (both of its
    // sides would busy-poll on one CPU).
    sched_setaffinity(0, sizeof start_cpus_, &start_cpus_);
  }
  ferry::Worker& me() { return *me_; }

 private:
  cpu_set_t start_cpus_;
  std::unique_ptr<ferry::Worker> me_;
  pid_t pid_ = 0;
  int to_peer_ = -1;
};

Summary NoopRpcSync(ferry::Worker& me, int iters) {
  for (int i = 0; i < 500; ++i) me.RpcSync("peer", "noop");
  std::vector<double> rtt;
  rtt.reserve(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    me.RpcSync("peer", "noop");
    rtt.push_back(Ns(Clock::now() - t0));
  }
  return Summarize(rtt);
}

// remote() + release, n times, until the owner freed every value: µs per RRef.
double RRefCreateDelete(ferry::Worker& me, int n) {
  const auto r0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    ferry::RRef r = me.Remote("peer", "value");
  }
  while (std::string(me.RpcSync("peer", "owned").bytes()) != "0") {
  }
  return Ns(Clock::now() - r0) / 1e3 / n;
}

std::vector<std::pair<int, double>> AsyncThroughput(ferry::Worker& me, int iters) {
  std::vector<std::pair<int, double>> tput;
  for (int window : {1, 8, 64}) {
    const int total = std::max(2000, iters * 2);
    const auto t0 = Clock::now();
    int issued = 0, done = 0;
    std::vector<std::unique_ptr<ferry::Future>> ring;
    size_t head = 0;
    while (done < total) {
      while (issued < total && static_cast<int>(ring.size() - head) < window) {
        ring.push_back(std::make_unique<ferry::Future>(me.RpcAsync("peer", "noop")));
        ++issued;
      }
      ring[head]->Get();
      ring[head].reset();
      ++head;
      ++done;
    }
    const double secs = Ns(Clock::now() - t0) / 1e9;
    tput.push_back({window, total / secs});
    std::printf("  rpc_async %2d in flight: %10.0f calls/s\n", window, total / secs);
  }
  return tput;
}

std::vector<std::pair<int64_t, Summary>> TensorEcho(ferry::Worker& me, int iters) {
  std::vector<std::pair<int64_t, Summary>> echo;
  for (int64_t size : {int64_t(1) << 10, int64_t(64) << 10, int64_t(1) << 20,
                       int64_t(16) << 20, int64_t(64) << 20}) {
    std::vector<char> buf(static_cast<size_t>(size), 1);
    const int n = std::max(
        10, static_cast<int>(std::min<int64_t>(iters, (int64_t(1) << 30) / size)));
    std::vector<double> t;
    for (int i = 0; i < n + 3; ++i) {
      ferry::Payload p;
      p.Tensor(View(buf.data(), size));
      const auto t0 = Clock::now();
      ferry::Message m = me.RpcSync("peer", "echo", std::move(p));
      DLManagedTensor* back = m.TakeTensor(0);
      const auto dt = Clock::now() - t0;
      back->deleter(back);
      if (i >= 3) t.push_back(Ns(dt));
    }
    const Summary s = Summarize(t);
    echo.push_back({size, s});
    std::printf("  tensor echo %6lld KiB median %9.1f us  p99 %9.1f us  (%.2f GB/s rt)\n",
                static_cast<long long>(size >> 10), s.median / 1e3, s.p99 / 1e3,
                2.0 * static_cast<double>(size) / s.median);
  }
  return echo;
}

double MedianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0;
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

std::string JsonArray(const std::vector<double>& v) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < v.size(); ++i) o << (i ? ", " : "") << v[i];
  o << "]";
  return o.str();
}

}  // namespace

constexpr const char* kUsage =
    "usage: ferry bench rpc [options]\n"
    "\n"
    "The core's costs over a transport, beside that transport's own ping-pong\n"
    "measured in the same run; two processes pinned to CPUs 0 and 1.\n"
    "\n"
    "  --transport NAME  the workers' transport (default tcp)\n"
    "  --mode busy|sleep|both\n"
    "                    busy-poll, sleeping, or both in turn (default both)\n"
    "  --iters N         rpc_sync round trips per round (default 10000)\n"
    "  --rounds N        rounds; the core's cost is the median of the\n"
    "                    per-round differences (default 5)\n"
    "  --rrefs N         RRefs created and released per round (default\n"
    "                    iters / 5, at least 200); 200000 shows how a long\n"
    "                    backlog of them scales\n"
    "  --json FILE       write every figure as JSON\n"
    "  --help            this text\n";

// A positive count option, or exits with a clear error.
int CountOption(const std::map<std::string, std::string>& opt, const std::string& key,
                int fallback) {
  auto it = opt.find(key);
  if (it == opt.end()) return fallback;
  char* end = nullptr;
  const long v = std::strtol(it->second.c_str(), &end, 10);
  if (end == it->second.c_str() || *end != '\0' || v < 1 || v > 1000000000) {
    std::fprintf(stderr, "ferry bench rpc: %s takes a positive whole number, not '%s'\n",
                 key.c_str(), it->second.c_str());
    std::exit(2);
  }
  return static_cast<int>(v);
}

int main(int argc, char** argv) {
  std::map<std::string, std::string> opt;
  static const char* const kKnown[] = {"--transport", "--mode", "--iters", "--rounds",
                                       "--rrefs", "--json",
                                       // the peer process's own, set by the benchmark
                                       "--store", "--job", "--busy"};
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--help" || k == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (k == "--peer") {
      opt["--peer"] = "1";
      continue;
    }
    if (std::find(std::begin(kKnown), std::end(kKnown), k) == std::end(kKnown)) {
      std::fprintf(stderr, "ferry bench rpc: unknown option '%s'\n\n%s", k.c_str(),
                   kUsage);
      return 2;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "ferry bench rpc: %s needs a value\n\n%s", k.c_str(), kUsage);
      return 2;
    }
    opt[k] = argv[++i];
  }
  const std::string transport = opt.count("--transport") ? opt["--transport"] : "tcp";
  if (opt.count("--peer")) {
    return RunPeer(opt["--store"], opt["--job"], transport, opt["--busy"] == "1");
  }
  const int iters = CountOption(opt, "--iters", 10000);
  const int rounds = CountOption(opt, "--rounds", 5);
  // Each round is a full measurement: --iters round trips of each side, and
  // iters/5 RRefs (the final wait for the owner to free them, about one
  // acknowledgement flush, must stay small against the whole).
  const int round_rrefs = CountOption(opt, "--rrefs", std::max(200, iters / 5));
  const std::string modes = opt.count("--mode") ? opt["--mode"] : "both";
  if (modes != "busy" && modes != "sleep" && modes != "both") {
    std::fprintf(stderr, "ferry bench rpc: --mode is busy, sleep or both, not '%s'\n",
                 modes.c_str());
    return 2;
  }
  const std::string json_path = opt.count("--json") ? opt["--json"] : "";
  std::string self_dir = argv[0];
  self_dir = self_dir.substr(0, self_dir.find_last_of('/'));
  if (self_dir == argv[0]) self_dir = ".";

  std::ostringstream js;
  js << "{\"benchmark\": \"ferry-bench-rpc\", \"transport\": \"" << transport
     << "\", \"iters\": " << iters << ", \"rounds\": " << rounds << ", \"suites\": [";
  bool first_suite = true;
  for (bool busy : {true, false}) {
    if ((busy && modes == "sleep") || (!busy && modes == "busy")) continue;
    const char* mode = busy ? "busy" : "sleep";
    std::printf("== mode %s, transport %s, %d rounds\n", mode, transport.c_str(), rounds);

    // Rounds: the transport's ping-pong, then rpc_sync and RRefs on fresh
    // workers (nothing of ferry's busy-polls while the floor is measured).
    std::vector<double> tp_median, tp_raw, noop_median, noop_p99, overhead, rref_us;
    std::vector<std::pair<int, double>> tput;
    std::vector<std::pair<int64_t, Summary>> echo;
    bool tp_ok = true;
    for (int r = 0; r < rounds; ++r) {
      const Transport64 tp = TransportPingPong(self_dir, transport, busy, iters);
      tp_ok = tp_ok && tp.ok;
      Session s(argv[0], transport, busy, std::string(mode) + std::to_string(r));
      const Summary noop = NoopRpcSync(s.me(), iters);
      const double rref = RRefCreateDelete(s.me(), round_rrefs);
      std::printf(
          "  round %d: transport ping-pong %5.1f us (raw TCP %5.1f), rpc_sync no-op "
          "%5.1f us (p99 %5.1f): core adds %4.1f us; RRef create+delete %5.1f us\n",
          r + 1, tp.ferry_median / 1e3, tp.raw_median / 1e3, noop.median / 1e3,
          noop.p99 / 1e3, (noop.median - tp.ferry_median) / 1e3, rref);
      tp_median.push_back(tp.ferry_median);
      tp_raw.push_back(tp.raw_median);
      noop_median.push_back(noop.median);
      noop_p99.push_back(noop.p99);
      overhead.push_back(noop.median - tp.ferry_median);
      rref_us.push_back(rref);
      if (r == rounds - 1) {  // once: throughput and tensors
        tput = AsyncThroughput(s.me(), iters);
        echo = TensorEcho(s.me(), iters);
      }
    }
    const auto [omin, omax] = std::minmax_element(overhead.begin(), overhead.end());
    const auto [rmin, rmax] = std::minmax_element(rref_us.begin(), rref_us.end());
    std::printf("  rpc_sync no-op      median %8.1f us  p99 %8.1f us",
                MedianOf(noop_median) / 1e3, MedianOf(noop_p99) / 1e3);
    if (tp_ok) {
      std::printf(
          "   | transport ping-pong median %.1f us (raw TCP %.1f us): core adds %.1f us "
          "(median of %d rounds; %.1f .. %.1f)",
          MedianOf(tp_median) / 1e3, MedianOf(tp_raw) / 1e3, MedianOf(overhead) / 1e3,
          rounds, *omin / 1e3, *omax / 1e3);
    }
    std::printf(
        "\n  RRef create+delete  %8.1f us amortized over %d per round (median of %d "
        "rounds; %.1f .. %.1f; until the owner freed all)\n",
        MedianOf(rref_us), round_rrefs, rounds, *rmin, *rmax);

    // join time
    std::vector<std::pair<int, double>> joins;
    for (int n : {2, 4}) {
      std::vector<double> t;
      for (int rep = 0; rep < 5; ++rep) t.push_back(JoinMs(n, transport));
      std::sort(t.begin(), t.end());
      joins.push_back({n, t[t.size() / 2]});
      std::printf(
          "  join %d workers      %8.2f ms (median of 5; store start to all %d seen)\n",
          n, t[t.size() / 2], n);
    }

    js << (first_suite ? "" : ", ") << "{\"mode\": \"" << mode << "\", "
       << "\"transport_pingpong_64B\": {\"ferry_median_ns\": " << MedianOf(tp_median)
       << ", \"raw_tcp_median_ns\": " << MedianOf(tp_raw)
       << ", \"ferry_median_ns_per_round\": " << JsonArray(tp_median)
       << ", \"raw_tcp_median_ns_per_round\": " << JsonArray(tp_raw)
       << "}, \"rpc_sync_noop\": {\"median_ns\": " << MedianOf(noop_median)
       << ", \"p99_ns\": " << MedianOf(noop_p99)
       << ", \"median_ns_per_round\": " << JsonArray(noop_median)
       << ", \"overhead_over_transport_ns\": " << (tp_ok ? MedianOf(overhead) : -1)
       << ", \"overhead_over_transport_ns_per_round\": " << JsonArray(overhead)
       << "}, \"rpc_async_calls_per_s\": {";
    for (size_t i = 0; i < tput.size(); ++i) {
      js << (i ? ", " : "") << "\"" << tput[i].first << "\": " << tput[i].second;
    }
    js << "}, \"tensor_echo\": [";
    for (size_t i = 0; i < echo.size(); ++i) {
      js << (i ? ", " : "") << "{\"bytes\": " << echo[i].first
         << ", \"median_ns\": " << echo[i].second.median
         << ", \"p99_ns\": " << echo[i].second.p99 << "}";
    }
    js << "], \"rref_create_delete_us\": " << MedianOf(rref_us)
       << ", \"rref_create_delete_us_per_round\": " << JsonArray(rref_us)
       << ", \"join_ms\": {";
    for (size_t i = 0; i < joins.size(); ++i) {
      js << (i ? ", " : "") << "\"" << joins[i].first << "\": " << joins[i].second;
    }
    js << "}}";
    first_suite = false;
  }
  js << "]}\n";
  if (!json_path.empty()) {
    std::ofstream(json_path) << js.str();
    std::printf("wrote %s\n", json_path.c_str());
  }
  return 0;
}
