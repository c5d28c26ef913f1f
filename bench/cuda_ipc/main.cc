// ferry-bench-cuda: device tensors between two processes on one GPU, beside
// the GPU's own device-to-device copy measured in the same run.
//
//   (a) bandwidth: process A streams rpc_async calls to process B, each
//       carrying one device tensor that lands in B's GPU memory (several in
//       flight); GB/s counts each tensor's bytes once;
//   (b) reference: cuMemcpyDtoDAsync in process A, buffer to buffer on the
//       same GPU, same sizes, bytes counted once;
//   ratio (a)/(b), per size, median of --rounds rounds (each round measures
//   both, reference first);
//   (c) latency: rpc_sync echo of a 4 KiB device tensor (A -> B's GPU ->
//       back into A's GPU), busy-polling workers, median and p99; a host
//       no-op rpc_sync and a host 4 KiB tensor echo on the same workers for
//       scale.
// Goals (printed PASS/MISS): at >= 64 MiB, (a) >= 0.9x (b); the 4 KiB
// device echo's median < 20 us.
//
// Exit codes: 0 measured (goals missed or not), 1 a ferry or CUDA error,
// 2 bad usage, 77 no GPU here (the message says why).
#include <ferry_support/cuda_driver.h>
#include <ferry/ferry.hpp>

#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
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

constexpr int kExitNoGpu = 77;
constexpr int64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024;
constexpr double kBandwidthGoal = 0.9;  // x the in-process D2D copy
constexpr int64_t kBandwidthGoalFrom = 64 * kMiB;
constexpr double kLatencyGoalUs = 20.0;  // 4 KiB device rpc_sync, busy poll
constexpr int64_t kLatencyBytes = 4 * kKiB;

const ferry_cuda::Driver* cu = nullptr;

// A CUDA call that must succeed; throws with the call's text otherwise.
void Cu(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    throw std::runtime_error(std::string(what) + ": " + cu->ErrorText(r));
  }
}

double Ns(Clock::duration d) {
  return static_cast<double>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

void Pin(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);
}

struct Summary {
  double median = 0, p99 = 0;
  size_t n = 0;
};
Summary Summarize(std::vector<double> v) {
  Summary s;
  std::sort(v.begin(), v.end());
  s.n = v.size();
  if (v.empty()) return s;
  s.median = v[v.size() / 2];
  s.p99 = v[std::min(v.size() - 1, (v.size() * 99 + 99) / 100 - 1)];
  return s;
}

double MedianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0;
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

std::string SizeName(int64_t n) {
  if (n >= kGiB && n % kGiB == 0) return std::to_string(n / kGiB) + " GiB";
  if (n >= kMiB && n % kMiB == 0) return std::to_string(n / kMiB) + " MiB";
  if (n >= kKiB && n % kKiB == 0) return std::to_string(n / kKiB) + " KiB";
  return std::to_string(n) + " B";
}

// A tensor over memory its caller keeps (host or device): the deleter frees
// only the wrapper. ferry never writes a tensor it sends, so one buffer may
// be in flight several times at once.
DLManagedTensor* View(void* data, int64_t bytes, DLDevice device) {
  struct Box {
    DLManagedTensor t;
    int64_t shape[1];
  };
  auto* b = new Box();
  b->shape[0] = bytes;
  b->t.dl_tensor.data = data;
  b->t.dl_tensor.device = device;
  b->t.dl_tensor.ndim = 1;
  b->t.dl_tensor.dtype = {kDLUInt, 8, 1};
  b->t.dl_tensor.shape = b->shape;
  b->t.manager_ctx = b;
  b->t.deleter = [](DLManagedTensor* self) {
    delete static_cast<Box*>(self->manager_ctx);
  };
  return &b->t;
}

int64_t TensorBytes(const DLTensor& t) {
  int64_t n = (t.dtype.bits * t.dtype.lanes + 7) / 8;
  for (int i = 0; i < t.ndim; ++i) n *= t.shape[i];
  return n;
}

const char* DeviceTypeName(int32_t type) {
  switch (type) {
    case kDLCPU:
      return "host memory (kDLCPU)";
    case kDLCUDA:
      return "CUDA device memory (kDLCUDA)";
    case kDLCUDAHost:
      return "CUDA pinned host memory (kDLCUDAHost)";
    case kDLCUDAManaged:
      return "CUDA managed memory (kDLCUDAManaged)";
    default:
      return "an unexpected device type";
  }
}

// The device, its primary context current on the calling thread.
struct Gpu {
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  std::string name, pci;
  void Open(int ordinal) {
    Cu(cu->cuDeviceGet(&dev, ordinal), "cuDeviceGet");
    Cu(cu->cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    Current();
    char buf[256] = {};
    cu->cuDeviceGetName(buf, sizeof buf - 1, dev);
    name = buf;
    std::memset(buf, 0, sizeof buf);
    cu->cuDeviceGetPCIBusId(buf, sizeof buf - 1, dev);
    pci = buf;
  }
  void Current() const { Cu(cu->cuCtxSetCurrent(ctx), "cuCtxSetCurrent"); }
};

// A run's options (the peer gets those it needs on its command line).
struct Options {
  std::string transport = "shm,cuda_ipc";
  std::vector<int64_t> sizes = {4 * kKiB,  64 * kKiB,  1 * kMiB, 16 * kMiB,
                                64 * kMiB, 256 * kMiB, 1 * kGiB};
  int device = 0;
  int window = 8;
  int rounds = 3;
  int iters = 10000;
  double budget = 8.0 * static_cast<double>(kGiB);  // bytes per size per round
  int max_calls = 20000;
  int cpu_a = -1, cpu_b = -1;  // --cpus A,B; -1: not pinned
  bool busy = true;
  // The stream the device tensors (and the echo's reply) are declared on:
  // legacy, as DLPack's consumers default to, or ready (no wait at all).
  std::string stream_name = "legacy";
  uint64_t stream = FERRY_STREAM_LEGACY;
  bool peer_in_process = false;
  std::string json;
};

// ---- the peer (process B) ---------------------------------------------------

// Pattern byte of a size's source buffer, so B can check what landed.
uint8_t PatternFor(int64_t size) {
  return static_cast<uint8_t>(0x5a ^ (size >> 10));
}

// The peer's worker and its functions; `gpu` outlives it.
std::unique_ptr<ferry::Worker> StartPeer(const Options& o, const std::string& store,
                                         const std::string& job, Gpu& gpu) {
  ferry::Worker::Options wo;
  wo.name = "peer";
  wo.store = store;
  wo.job = job;
  wo.transport = o.transport;
  wo.busy_poll = o.busy;
  auto worker = std::make_unique<ferry::Worker>(wo);
  ferry::Worker& w = *worker;
  w.Register("noop", [](ferry::Call& c, ferry::Message) { c.Reply(); });
  // The bandwidth sink: the tensor is in this process's GPU memory when the
  // handler runs; it is released at once (back to ferry's pool).
  w.Register("sink", [](ferry::Call& c, ferry::Message args) {
    DLManagedTensor* t = args.num_tensors() == 1 ? args.TakeTensor(0) : nullptr;
    if (t == nullptr) {
      c.Fail(FERRY_INVALID_ARGUMENT, "sink expects one tensor");
      return;
    }
    const int32_t type = t->dl_tensor.device.device_type;
    t->deleter(t);
    if (type != kDLCUDA) {
      c.Fail(FERRY_FAILED_PRECONDITION, std::string("the tensor arrived in ") +
                                            DeviceTypeName(type) +
                                            ", not in this process's GPU memory");
      return;
    }
    c.Reply();
  });
  // Echo: the received device tensor goes back as the result.
  w.Register("echo", [&o](ferry::Call& c, ferry::Message args) {
    ferry::Payload p;
    p.Stream(o.stream);
    for (uint32_t i = 0; i < args.num_tensors(); ++i) p.Tensor(args.TakeTensor(i));
    c.Reply(std::move(p));
  });
  // Correctness, outside the timed loops: the tensor is on this GPU and
  // holds the sender's pattern (its first and last 4 KiB are read back).
  w.Register(
      "check",
      [&gpu](ferry::Call& c, ferry::Message args) {
        DLManagedTensor* t = args.num_tensors() == 1 ? args.TakeTensor(0) : nullptr;
        if (t == nullptr) {
          c.Fail(FERRY_INVALID_ARGUMENT, "check expects one tensor");
          return;
        }
        std::unique_ptr<DLManagedTensor, void (*)(DLManagedTensor*)> hold(
            t, [](DLManagedTensor* x) { x->deleter(x); });
        const DLTensor& d = t->dl_tensor;
        const int64_t n = TensorBytes(d);
        std::string why;
        if (d.device.device_type != kDLCUDA) {
          why = std::string("arrived in ") + DeviceTypeName(d.device.device_type);
        } else {
          gpu.Current();
          const uint8_t want = PatternFor(n);
          const int64_t part = std::min<int64_t>(n, 4 * kKiB);
          std::vector<uint8_t> host(static_cast<size_t>(part));
          const auto base = reinterpret_cast<CUdeviceptr>(d.data) +
                            static_cast<CUdeviceptr>(d.byte_offset);
          for (int64_t off : {int64_t(0), n - part}) {
            CUresult r =
                cu->cuMemcpyDtoH(host.data(), base + static_cast<CUdeviceptr>(off),
                                 static_cast<size_t>(part));
            if (r != CUDA_SUCCESS) {
              why = "cuMemcpyDtoH of the received tensor: " + cu->ErrorText(r);
              break;
            }
            for (int64_t i = 0; i < part && why.empty(); ++i) {
              if (host[static_cast<size_t>(i)] != want) {
                why = "byte " + std::to_string(off + i) + " is " +
                      std::to_string(host[static_cast<size_t>(i)]) + ", sent " +
                      std::to_string(want);
              }
            }
          }
        }
        c.Reply(ferry::Payload(why.empty() ? "ok" : why));
      },
      FERRY_HANDLER_MAY_BLOCK);
  return worker;
}

int RunPeer(const Options& o, const std::string& store, const std::string& job) {
  Pin(o.cpu_b);
  Gpu gpu;
  gpu.Open(o.device);
  std::unique_ptr<ferry::Worker> w = StartPeer(o, store, job, gpu);
  char buf[16];
  while (read(0, buf, sizeof buf) > 0) {
  }
  w->Shutdown(2000ms);
  return 0;
}

// ---- process A --------------------------------------------------------------

// A worker here and the peer process; the peer exits when its stdin closes.
class Session {
 public:
  Session(const char* self, const Options& o) {
    const std::string job = "bench-cuda-" + std::to_string(getpid());
    ferry::Worker::Options wo;
    wo.name = "bench";
    wo.job = job;
    wo.transport = o.transport;
    wo.store = "127.0.0.1:0";
    wo.host_store = true;
    wo.busy_poll = o.busy;
    me_ = std::make_unique<ferry::Worker>(wo);
    if (o.peer_in_process) {
      // One process, one CUDA context: what the two-process figures would
      // be without the GPU switching between two processes' contexts.
      peer_gpu_.Open(o.device);
      peer_ = StartPeer(o, me_->store_address(), job, peer_gpu_);
      me_->WaitForWorkers(2, 30000ms);
      return;
    }
    int in[2];
    if (pipe(in) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_addclose(&fa, in[1]);
    std::vector<std::string> args = {
        self,
        "--peer",
        "--store",
        me_->store_address(),
        "--job",
        job,
        "--transport",
        o.transport,
        "--device",
        std::to_string(o.device),
        "--cpus",
        std::to_string(o.cpu_a) + "," + std::to_string(o.cpu_b),
        "--stream",
        o.stream_name,
        o.busy ? "--busy" : "--sleep"};
    std::vector<char*> av;
    for (auto& a : args) av.push_back(a.data());
    av.push_back(nullptr);
    // This very program, however it was started (argv[0] may be a bare
    // name found on PATH).
    char exe[4096] = {};
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    const char* path = n > 0 ? exe : self;
    const int rc = posix_spawn(&pid_, path, &fa, nullptr, av.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    if (rc != 0) {
      close(in[1]);
      throw std::runtime_error("cannot start the peer process: " +
                               std::string(std::strerror(rc)));
    }
    to_peer_ = in[1];
    me_->WaitForWorkers(2, 30000ms);
  }
  ~Session() {
    if (peer_) {
      try {
        peer_->Shutdown(2000ms);
      } catch (const std::exception&) {
      }
    }
    if (to_peer_ >= 0) close(to_peer_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
    try {
      me_->Shutdown(2000ms);
    } catch (const std::exception&) {
    }
  }
  ferry::Worker& me() { return *me_; }
  std::string PeerTransport() {
    for (const auto& m : me_->Members()) {
      if (m.name == "peer") return m.transport.empty() ? "(not connected)" : m.transport;
    }
    return "(unknown)";
  }

 private:
  std::unique_ptr<ferry::Worker> me_;
  Gpu peer_gpu_;                         // --peer-in-process
  std::unique_ptr<ferry::Worker> peer_;  // --peer-in-process
  pid_t pid_ = 0;
  int to_peer_ = -1;
};

ferry::Payload DevicePayload(CUdeviceptr p, int64_t size, const Options& o) {
  ferry::Payload pl;
  // The source buffer was written and synchronised before the run, so
  // FERRY_STREAM_READY would be true; the default, legacy, measures what a
  // framework's tensor costs (ferry orders the copy after that stream).
  pl.Stream(o.stream);
  pl.Tensor(View(reinterpret_cast<void*>(p), size, DLDevice{kDLCUDA, o.device}));
  return pl;
}

// The number of calls (and copies) per size and round.
int CallsFor(const Options& o, int64_t size) {
  const double n = o.budget / static_cast<double>(size);
  return static_cast<int>(std::clamp(n, 8.0, static_cast<double>(o.max_calls)));
}

// (a): `calls` sink calls, `window` in flight; GB/s (bytes counted once).
double FerryBandwidth(ferry::Worker& me, CUdeviceptr src, int64_t size, int calls,
                      const Options& o) {
  std::deque<ferry::Future> inflight;
  const auto t0 = Clock::now();
  int issued = 0;
  while (issued < calls || !inflight.empty()) {
    while (issued < calls && static_cast<int>(inflight.size()) < o.window) {
      inflight.push_back(me.RpcAsync("peer", "sink", DevicePayload(src, size, o)));
      ++issued;
    }
    inflight.front().Get();  // throws the callee's error (e.g. staged to host)
    inflight.pop_front();
  }
  const double secs = Ns(Clock::now() - t0) / 1e9;
  return static_cast<double>(size) * calls / secs / 1e9;
}

// (b): `calls` device-to-device copies on one stream; GB/s (bytes once).
double DtoDBandwidth(CUdeviceptr dst, CUdeviceptr src, int64_t size, int calls,
                     CUstream s) {
  Cu(cu->cuMemcpyDtoDAsync(dst, src, static_cast<size_t>(size), s), "cuMemcpyDtoDAsync");
  Cu(cu->cuStreamSynchronize(s), "cuStreamSynchronize");
  const auto t0 = Clock::now();
  for (int i = 0; i < calls; ++i) {
    Cu(cu->cuMemcpyDtoDAsync(dst, src, static_cast<size_t>(size), s),
       "cuMemcpyDtoDAsync");
  }
  Cu(cu->cuStreamSynchronize(s), "cuStreamSynchronize");
  const double secs = Ns(Clock::now() - t0) / 1e9;
  return static_cast<double>(size) * calls / secs / 1e9;
}

struct SizeResult {
  int64_t bytes = 0;
  int calls = 0;
  std::vector<double> ferry, d2d;  // GB/s per round
  double ferry_med = 0, d2d_med = 0, ratio = 0;
  bool goal = false, met = false;
};

struct LatencyResult {
  Summary device_echo, host_noop, host_echo;
  bool met = false;
};

template <typename F>
Summary Time(int warmup, int iters, F&& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t;
  t.reserve(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    fn();
    t.push_back(Ns(Clock::now() - t0));
  }
  return Summarize(t);
}

LatencyResult Latency(ferry::Worker& me, CUdeviceptr src, const Options& o) {
  LatencyResult r;
  std::vector<uint8_t> host(static_cast<size_t>(kLatencyBytes), 1);
  const int warm = std::min(500, o.iters);
  r.host_noop = Time(warm, o.iters, [&] { me.RpcSync("peer", "noop"); });
  r.host_echo = Time(warm, o.iters, [&] {
    ferry::Payload p;
    p.Tensor(View(host.data(), kLatencyBytes, DLDevice{kDLCPU, 0}));
    ferry::Message m = me.RpcSync("peer", "echo", std::move(p));
    DLManagedTensor* back = m.TakeTensor(0);
    if (back != nullptr) back->deleter(back);
  });
  std::string wrong;
  r.device_echo = Time(warm, o.iters, [&] {
    ferry::Message m = me.RpcSync("peer", "echo", DevicePayload(src, kLatencyBytes, o));
    DLManagedTensor* back = m.TakeTensor(0);
    if (back == nullptr)
      throw std::runtime_error("the echo came back without its tensor");
    const int32_t type = back->dl_tensor.device.device_type;
    back->deleter(back);
    if (type != kDLCUDA) {
      throw std::runtime_error(std::string("the echoed device tensor came back in ") +
                               DeviceTypeName(type));
    }
  });
  r.met = r.device_echo.median / 1e3 < kLatencyGoalUs;
  return r;
}

// Device messages sent over a device transport and those staged through
// host memory, from the worker's stats (C API 0.2); -1 where this ferry.h
// has no such fields.
template <typename S>
auto StagedCounts(const S& s, int)
    -> decltype(s.staged_messages, std::pair<double, double>()) {
  return {static_cast<double>(s.device_messages), static_cast<double>(s.staged_messages)};
}
template <typename S>
std::pair<double, double> StagedCounts(const S&, long) {
  return {-1, -1};
}

std::string JsonArray(const std::vector<double>& v) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < v.size(); ++i) o << (i ? ", " : "") << v[i];
  o << "]";
  return o.str();
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string JsonSummary(const Summary& s) {
  std::ostringstream o;
  o << "{\"n\": " << s.n << ", \"median_us\": " << s.median / 1e3
    << ", \"p99_us\": " << s.p99 / 1e3 << "}";
  return o.str();
}

constexpr const char* kUsage =
    "usage: ferry-bench-cuda [options]\n"
    "\n"
    "Device tensors between two processes on one GPU over ferry, beside\n"
    "cuMemcpyDtoD in one process measured in the same run; and the round trip\n"
    "of a 4 KiB device tensor rpc_sync (busy-poll) beside a host no-op.\n"
    "\n"
    "  --transport LIST  the workers' transport (default shm,cuda_ipc; or auto)\n"
    "  --sizes LIST      tensor sizes, e.g. 4K,1M,64M,1G (default\n"
    "                    4K,64K,1M,16M,64M,256M,1G)\n"
    "  --window N        calls in flight in the bandwidth runs (default 8)\n"
    "  --rounds N        rounds; each measures the copy then ferry; figures\n"
    "                    are the medians of the rounds (default 3)\n"
    "  --budget BYTES    bytes moved per size and round (default 8G; at least\n"
    "                    8 and at most --max-calls calls)\n"
    "  --max-calls N     (default 20000)\n"
    "  --iters N         round trips per latency figure (default 10000)\n"
    "  --device N        the GPU (default 0)\n"
    "  --cpus A,B|none   pin this process to CPU A and the peer to B (default\n"
    "                    none: each process's threads, the plugin's included,\n"
    "                    go where the scheduler puts them)\n"
    "  --stream S        the stream the device tensors are declared on: legacy\n"
    "                    (default: ferry orders after it) or ready (no wait)\n"
    "  --peer-in-process the peer worker in this process (one CUDA context):\n"
    "                    isolates what two processes' contexts cost\n"
    "  --sleep           sleeping workers instead of busy-polling ones (the\n"
    "                    latency goal is a busy-poll figure)\n"
    "  --json FILE       write every figure as JSON\n"
    "  --help            this text\n"
    "\n"
    "Exit status: 0 measured, 1 ferry or CUDA failed, 2 usage, 77 no GPU.\n";

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr, "ferry-bench-cuda: %s\n\n%s", why.c_str(), kUsage);
  std::exit(2);
}

int64_t ParseSize(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || v <= 0) Usage("not a size: '" + s + "'");
  double mult = 1;
  const std::string unit = end;
  if (unit == "K" || unit == "k" || unit == "KiB") {
    mult = static_cast<double>(kKiB);
  } else if (unit == "M" || unit == "MiB") {
    mult = static_cast<double>(kMiB);
  } else if (unit == "G" || unit == "GiB") {
    mult = static_cast<double>(kGiB);
  } else if (!unit.empty()) {
    Usage("not a size: '" + s + "' (use 4K, 64M, 1G)");
  }
  return static_cast<int64_t>(v * mult);
}

int ParseCount(const std::string& key, const std::string& s) {
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (end == s.c_str() || *end != '\0' || v < 1 || v > 100000000) {
    Usage(key + " takes a positive whole number, not '" + s + "'");
  }
  return static_cast<int>(v);
}

Options Parse(int argc, char** argv, bool* peer, std::string* store, std::string* job) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--help" || k == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (k == "--peer") {
      *peer = true;
      continue;
    }
    if (k == "--peer-in-process") {
      o.peer_in_process = true;
      continue;
    }
    if (k == "--busy" || k == "--sleep") {
      o.busy = k == "--busy";
      continue;
    }
    if (i + 1 >= argc) Usage(k + " needs a value");
    const std::string v = argv[++i];
    if (k == "--transport") {
      o.transport = v;
    } else if (k == "--sizes") {
      o.sizes.clear();
      std::stringstream ss(v);
      for (std::string part; std::getline(ss, part, ',');)
        o.sizes.push_back(ParseSize(part));
      if (o.sizes.empty()) Usage("--sizes is empty");
    } else if (k == "--window") {
      o.window = ParseCount(k, v);
    } else if (k == "--rounds") {
      o.rounds = ParseCount(k, v);
    } else if (k == "--budget") {
      o.budget = static_cast<double>(ParseSize(v));
    } else if (k == "--max-calls") {
      o.max_calls = ParseCount(k, v);
    } else if (k == "--iters") {
      o.iters = ParseCount(k, v);
    } else if (k == "--device") {
      char* end = nullptr;
      o.device = static_cast<int>(std::strtol(v.c_str(), &end, 10));
      if (end == v.c_str() || *end != '\0' || o.device < 0)
        Usage("bad --device '" + v + "'");
    } else if (k == "--cpus") {
      if (v == "none") {
        o.cpu_a = o.cpu_b = -1;
      } else if (std::sscanf(v.c_str(), "%d,%d", &o.cpu_a, &o.cpu_b) != 2) {
        Usage("--cpus takes A,B or none, not '" + v + "'");
      }
    } else if (k == "--stream") {
      if (v == "legacy") {
        o.stream = FERRY_STREAM_LEGACY;
      } else if (v == "ready") {
        o.stream = FERRY_STREAM_READY;
      } else {
        Usage("--stream takes legacy or ready, not '" + v + "'");
      }
      o.stream_name = v;
    } else if (k == "--json") {
      o.json = v;
    } else if (k == "--store") {
      *store = v;
    } else if (k == "--job") {
      *job = v;
    } else {
      Usage("unknown option '" + k + "'");
    }
  }
  return o;
}

int Run(const char* self, const Options& o) {
  Pin(o.cpu_a);
  Gpu gpu;
  gpu.Open(o.device);
  const int64_t max_size = *std::max_element(o.sizes.begin(), o.sizes.end());
  const int64_t alloc = std::max(max_size, kLatencyBytes);
  CUdeviceptr src = 0, dst = 0;
  CUstream stream = nullptr;
  Cu(cu->cuMemAlloc(&src, static_cast<size_t>(alloc)), "cuMemAlloc (source)");
  Cu(cu->cuMemAlloc(&dst, static_cast<size_t>(alloc)), "cuMemAlloc (copy target)");
  Cu(cu->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  struct Free {
    CUdeviceptr a, b;
    CUstream s;
    ~Free() {
      cu->cuStreamDestroy(s);
      cu->cuMemFree(a);
      cu->cuMemFree(b);
    }
  } free_at_exit{src, dst, stream};

  std::printf(
      "ferry-bench-cuda: GPU %d %s (%s), driver %d.%d; transport %s; %s workers; "
      "tensors on the %s stream%s\n",
      o.device, gpu.name.c_str(), gpu.pci.c_str(), cu->version / 1000,
      (cu->version % 1000) / 10, o.transport.c_str(),
      o.busy ? "busy-polling" : "sleeping", o.stream_name.c_str(),
      o.peer_in_process ? "; the peer in this process (one CUDA context)" : "");
  std::fflush(stdout);
  Session session(self, o);
  ferry::Worker& me = session.me();
  me.RpcSync("peer", "noop");

  // Bandwidth, per size: correctness once, then rounds of copy + ferry.
  std::vector<SizeResult> results;
  std::printf("\n  %-8s %6s %14s %14s %8s  %s\n", "size", "calls", "ferry GB/s",
              "D2D copy GB/s", "ratio", "goal");
  for (int64_t size : o.sizes) {
    SizeResult r;
    r.bytes = size;
    r.calls = CallsFor(o, size);
    Cu(cu->cuMemsetD8Async(src, PatternFor(size), static_cast<size_t>(size), stream),
       "cuMemsetD8Async");
    Cu(cu->cuStreamSynchronize(stream), "cuStreamSynchronize");
    const std::string check(
        me.RpcSync("peer", "check", DevicePayload(src, size, o)).bytes());
    if (check != "ok") {
      throw std::runtime_error(
          "the " + SizeName(size) +
          " tensor did not land in the peer's GPU memory as sent: " + check);
    }
    // Warm-up: the peer's receive pool and the IPC mappings of this size.
    FerryBandwidth(me, src, size, std::min(r.calls, 2 * o.window), o);
    for (int round = 0; round < o.rounds; ++round) {
      r.d2d.push_back(DtoDBandwidth(dst, src, size, r.calls, stream));
      r.ferry.push_back(FerryBandwidth(me, src, size, r.calls, o));
    }
    r.ferry_med = MedianOf(r.ferry);
    r.d2d_med = MedianOf(r.d2d);
    r.ratio = r.d2d_med > 0 ? r.ferry_med / r.d2d_med : 0;
    r.goal = size >= kBandwidthGoalFrom;
    r.met = r.ratio >= kBandwidthGoal;
    std::printf("  %-8s %6d %14.1f %14.1f %7.2fx  %s\n", SizeName(size).c_str(), r.calls,
                r.ferry_med, r.d2d_med, r.ratio,
                r.goal ? (r.met ? "PASS (>= 0.9x)" : "MISS (>= 0.9x)") : "-");
    std::fflush(stdout);
    results.push_back(r);
  }

  // How the bandwidth runs' tensors went: a staged one is no CUDA IPC figure.
  const auto [device_msgs, staged_msgs] = StagedCounts(me.Stats(), 0);
  if (device_msgs >= 0) {
    std::printf(
        "  this worker sent %.0f device messages over a device transport, %.0f staged "
        "through host memory%s\n",
        device_msgs, staged_msgs, staged_msgs > 0 ? "  (STAGED: not CUDA IPC)" : "");
  }

  // Latency.
  const LatencyResult lat = Latency(me, src, o);
  const std::string route = session.PeerTransport();
  std::printf(
      "\n  rpc_sync round trip (%s workers, %d each; peer reached over %s)\n"
      "  %-28s median %8.2f us  p99 %8.2f us  %s\n"
      "  %-28s median %8.2f us  p99 %8.2f us\n"
      "  %-28s median %8.2f us  p99 %8.2f us\n",
      o.busy ? "busy-poll" : "sleeping", o.iters, route.c_str(),
      "4 KiB device tensor echo", lat.device_echo.median / 1e3, lat.device_echo.p99 / 1e3,
      lat.met ? "PASS (< 20 us)" : "MISS (< 20 us)", "host no-op",
      lat.host_noop.median / 1e3, lat.host_noop.p99 / 1e3, "4 KiB host tensor echo",
      lat.host_echo.median / 1e3, lat.host_echo.p99 / 1e3);

  // Goals.
  int passed = 0, goals = 0;
  std::printf("\n  goals\n");
  for (const auto& r : results) {
    if (!r.goal) continue;
    ++goals;
    passed += r.met;
    std::printf("  %-4s %s bandwidth %.2fx the in-process D2D copy (goal >= %.1fx)\n",
                r.met ? "PASS" : "MISS", SizeName(r.bytes).c_str(), r.ratio,
                kBandwidthGoal);
  }
  ++goals;
  passed += lat.met;
  std::printf("  %-4s 4 KiB device rpc_sync median %.2f us (goal < %.0f us%s)\n",
              lat.met ? "PASS" : "MISS", lat.device_echo.median / 1e3, kLatencyGoalUs,
              o.busy ? "" : "; a busy-poll goal, this run slept");
  std::printf("  %d of %d goals met\n", passed, goals);

  if (!o.json.empty()) {
    std::ostringstream js;
    js << "{\"benchmark\": \"ferry-bench-cuda\", \"transport\": "
       << JsonString(o.transport) << ", \"peer_route\": " << JsonString(route)
       << ", \"mode\": " << (o.busy ? "\"busy\"" : "\"sleep\"")
       << ", \"stream\": " << JsonString(o.stream_name)
       << ", \"peer_in_process\": " << (o.peer_in_process ? "true" : "false")
       << ", \"gpu\": {\"index\": " << o.device << ", \"name\": " << JsonString(gpu.name)
       << ", \"pci_bus_id\": " << JsonString(gpu.pci)
       << ", \"driver_api\": " << cu->version << "}, \"window\": " << o.window
       << ", \"rounds\": " << o.rounds << ", \"cpus\": [" << o.cpu_a << ", " << o.cpu_b
       << "], \"device_messages\": " << device_msgs
       << ", \"staged_messages\": " << staged_msgs
       << ", \"bandwidth\": {\"unit\": \"GB/s (1e9 bytes/s, each tensor's bytes counted "
          "once)\", \"goal_ratio\": "
       << kBandwidthGoal << ", \"goal_from_bytes\": " << kBandwidthGoalFrom
       << ", \"sizes\": [";
    for (size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      js << (i ? ", " : "") << "{\"bytes\": " << r.bytes << ", \"calls\": " << r.calls
         << ", \"ferry_GBps\": " << r.ferry_med << ", \"d2d_GBps\": " << r.d2d_med
         << ", \"ratio\": " << r.ratio
         << ", \"ferry_GBps_per_round\": " << JsonArray(r.ferry)
         << ", \"d2d_GBps_per_round\": " << JsonArray(r.d2d)
         << ", \"goal\": " << (r.goal ? "true" : "false")
         << ", \"met\": " << (r.goal ? (r.met ? "true" : "false") : "null") << "}";
    }
    js << "]}, \"latency\": {\"iters\": " << o.iters
       << ", \"device_4KiB_echo\": " << JsonSummary(lat.device_echo)
       << ", \"host_noop\": " << JsonSummary(lat.host_noop)
       << ", \"host_4KiB_echo\": " << JsonSummary(lat.host_echo)
       << ", \"goal_median_us\": " << kLatencyGoalUs
       << ", \"met\": " << (lat.met ? "true" : "false") << "}, \"goals_met\": " << passed
       << ", \"goals\": " << goals << "}\n";
    std::ofstream out(o.json);
    out << js.str();
    if (!out) throw std::runtime_error("cannot write " + o.json);
    std::printf("wrote %s\n", o.json.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool peer = false;
  std::string store, job;
  const Options o = Parse(argc, argv, &peer, &store, &job);
  std::string why;
  cu = ferry_cuda::Driver::Get(&why);
  if (cu == nullptr) {
    std::fprintf(stderr, "ferry-bench-cuda: no GPU: %s\n", why.c_str());
    return kExitNoGpu;
  }
  if (o.device >= cu->devices) {
    std::fprintf(stderr, "ferry-bench-cuda: no GPU %d: the driver sees %d\n", o.device,
                 cu->devices);
    return kExitNoGpu;
  }
  // A peer that dies must not kill this process through a closed pipe.
  signal(SIGPIPE, SIG_IGN);
  try {
    if (peer) return RunPeer(o, store, job);
    return Run(argv[0], o);
  } catch (const ferry::Error& e) {
    std::fprintf(stderr, "ferry-bench-cuda%s: ferry failed (%s): %s\n",
                 peer ? " (peer)" : "", ferry_status_name(e.code()), e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ferry-bench-cuda%s: %s\n", peer ? " (peer)" : "", e.what());
  }
  return 1;
}
