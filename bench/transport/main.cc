// ferry-bench-transport: round-trip latency and bandwidth of a transport
// plugin, side by side in one run with a raw TCP ping-pong floor.
//
// Why a custom harness and not Google Benchmark (which is installed): what is
// measured here is a two-process exchange, and Google Benchmark is built
// around a function timed in a loop inside one process. It has no notion of a
// peer that must execute a mirrored schedule, it reports means over
// iterations rather than the median and p99 of individually timed round
// trips (a tail is the point of a latency benchmark), it picks iteration
// counts adaptively (the peer would have to guess them), and it cannot
// interleave a reference implementation with the measured one size by size.
// A plain loop around steady_clock, with both processes deriving the same
// plan from the same options, does all of that in a few hundred lines.
//
// Layout (one idea per file):
//   options.*           command line, and the peer's copy of it
//   plan.*              sizes -> warm-up, timed iterations, streaming bursts
//   peer_process.*      exec the peer, pin both processes, control channel
//   buffers.*           pre-faulted buffers shared by both implementations
//   raw_tcp_pingpong.*  the raw TCP floor
//   ferry_pingpong.*    the same exchanges through the loader + Transport
//   measure.*           the single timing loop both go through
//   stats.*             median / p99
//   report.*            table and JSON; machine_info.* what it ran on
#include "loader/plugin_loader.h"
#include "transport/buffers.h"
#include "transport/ferry_pingpong.h"
#include "transport/machine_info.h"
#include "transport/measure.h"
#include "transport/options.h"
#include "transport/peer_process.h"
#include "transport/plan.h"
#include "transport/raw_tcp_pingpong.h"
#include "transport/report.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace ferry::bench {
namespace {

constexpr int kSetupTimeoutMs = 30000;  // listen/accept/connect, per step

const char* g_role = "ferry-bench-transport";

int Fail(const Status& st) {
  std::fprintf(stderr, "%s: %s\n", g_role, st.ToString().c_str());
  return 1;
}

// The whole run is bounded: a peer that hangs (or a plugin that never
// reports an event) ends the run with a message instead of a stuck ctest.
void OnAlarm(int) {
  static const char msg[] =
      "ferry-bench-transport: --timeout expired, aborting\n";
  ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)ignored;
  _exit(3);
}

void StartWatchdog(uint32_t seconds) {
  struct sigaction sa {};
  sa.sa_handler = OnAlarm;
  sigaction(SIGALRM, &sa, nullptr);
  alarm(seconds);
}

std::string CommandLine(int argc, char** argv) {
  std::string out = "ferry-bench-transport";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const bool quote = a.find_first_of(" \t'\"$") != std::string::npos;
    out += " " + (quote ? "'" + a + "'" : a);
  }
  return out;
}

StatusOr<std::shared_ptr<const Plugin>> LoadPlugin(const std::string& name) {
  PluginLoader loader;  // FERRY_PLUGIN_PATH and the built-in search path
  return loader.Load(name);
}

// --------------------------------------------------------------------------
// The peer: echoes the client's schedule, one suite per mode.
// --------------------------------------------------------------------------
Status ServeSuite(const Options& o, const std::vector<SizePlan>& plan,
                  std::shared_ptr<const Plugin> plugin, PollMode mode,
                  BufferSet* buffers, ControlChannel* control) {
  auto listener = RawTcpListener::Open();
  if (!listener.ok()) return listener.status();
  auto ferry = FerryPingPong::Open(plugin, mode, buffers);
  if (!ferry.ok()) return ferry.status();
  auto ferry_address = ferry.value()->Listen(
      o.listen_given ? o.listen
                     : plugin->name() == "tcp" ? "127.0.0.1:0" : "");
  if (!ferry_address.ok()) return ferry_address.status();
  Status st = control->Send("READY " + listener.value()->address() + " " +
                            ferry_address.value());
  if (!st.ok()) return st;
  auto fd = listener.value()->Accept(kSetupTimeoutMs);
  if (!fd.ok()) return fd.status();
  RawTcpPingPong raw(fd.value(), mode, buffers);
  st = ferry.value()->Accept(kSetupTimeoutMs);
  for (size_t i = 0; st.ok() && i < plan.size(); ++i) {
    st = ServeSize(plan[i], o.window, i, o.only == "ferry" ? nullptr : &raw,
                   o.only == "raw" ? nullptr : ferry.value().get());
  }
  if (!st.ok()) return st;
  // Close only once the client has consumed the last reply: a close racing
  // the final echo would show up on the client as a broken connection.
  auto finished = control->Receive(kSetupTimeoutMs);
  if (!finished.ok()) return finished.status();
  st = ferry.value()->Close(kSetupTimeoutMs);
  if (!st.ok()) return st;
  return control->Send("DONE");
}

int RunPeer(const Options& o) {
  g_role = "ferry-bench-transport (peer)";
  // Never outlive the benchmark that started us.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  StartWatchdog(o.timeout_s);
  ControlChannel control(o.control_fd);
  if (o.pin) {
    Status st = PinToCpu(o.cpu_peer);
    if (!st.ok()) return Fail(st);
  }
  auto plugin = LoadPlugin(o.plugin);
  if (!plugin.ok()) return Fail(plugin.status());
  const std::vector<SizePlan> plan = BuildPlan(o);
  auto buffers = AllocatePeerBuffers(MaxSize(plan), o.stream ? o.window : 1);
  if (!buffers.ok()) return Fail(buffers.status());
  for (PollMode mode : o.modes) {
    Status st = ServeSuite(o, plan, plugin.value(), mode, &buffers.value(),
                           &control);
    if (!st.ok()) return Fail(st);
  }
  return 0;
}

// --------------------------------------------------------------------------
// The client: connects to the peer's listeners and times everything.
// --------------------------------------------------------------------------
Status RunSuite(const Options& o, const std::vector<SizePlan>& plan,
                std::shared_ptr<const Plugin> plugin, PollMode mode,
                BufferSet* buffers, ControlChannel* control,
                SuiteResult* out) {
  out->mode = mode;
  // The peer's "READY" may take a while the first time: it pre-faults its
  // buffers (hundreds of MiB with the default sizes).
  auto ready = control->Receive(4 * kSetupTimeoutMs);
  if (!ready.ok()) return ready.status();
  std::istringstream words(ready.value());
  std::string tag, raw_address, ferry_address;
  words >> tag >> raw_address >> ferry_address;
  if (tag != "READY" || ferry_address.empty()) {
    return Status(FERRY_INTERNAL, "unexpected control message from the peer: '" +
                                      ready.value() + "'");
  }
  auto fd = RawTcpConnect(raw_address);
  if (!fd.ok()) return fd.status();
  RawTcpPingPong raw(fd.value(), mode, buffers);
  auto ferry = FerryPingPong::Open(plugin, mode, buffers);
  if (!ferry.ok()) return ferry.status();
  Status st = ferry.value()->Connect(ferry_address, kSetupTimeoutMs);
  if (!st.ok()) return st;

  const Transport& t = ferry.value()->transport();
  out->caps = t.info().caps;
  out->description = t.description();
  out->wakeup_fd = t.info().wakeup_fd >= 0;
  out->registered = ferry.value()->registered();
  out->max_inline_size = t.info().max_inline_size;
  if (mode == PollMode::kSleep && t.HasCap(FERRY_CAP_BUSY_POLL)) {
    std::fprintf(stderr,
                 "warning: the plugin reports busy-poll in sleep mode; the "
                 "sleep figures are busy-poll figures\n");
  }

  out->loadavg_before = LoadAverage();
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < plan.size(); ++i) {
    SizeResult r;
    st = MeasureSize(plan[i], o.window, i, o.only == "ferry" ? nullptr : &raw,
                     o.only == "raw" ? nullptr : ferry.value().get(), buffers,
                     &r);
    if (!st.ok()) {
      return Status(st.code(), "mode " + std::string(PollModeName(mode)) +
                                   ", size " + FormatSize(plan[i].size) +
                                   ": " + st.message());
    }
    out->sizes.push_back(r);
  }
  out->seconds = std::chrono::duration<double>(
                     std::chrono::steady_clock::now() - t0)
                     .count();
  out->loadavg_after = LoadAverage();
  // Orderly shutdown: this side says FINISHED once it has every reply; the
  // peer then closes its end and says DONE; only then does this side close.
  // Neither side ever sees the other's close while it still expects data.
  st = control->Send("FINISHED");
  if (!st.ok()) return st;
  auto done = control->Receive(kSetupTimeoutMs);
  if (!done.ok()) return done.status();
  return ferry.value()->Close(kSetupTimeoutMs);
}

void PrintSummary(const std::vector<SuiteResult>& suites) {
  std::printf("\nsummary, ferry/raw:\n");
  for (const SuiteResult& s : suites) {
    const SizeResult& small = s.sizes.front();
    const SizeResult& large = s.sizes.back();
    std::printf("  %-5s %s round trip median %.2fx (p99 %.2fx); %s bandwidth "
                "from round trip %.2fx",
                PollModeName(s.mode), FormatSize(small.plan.size).c_str(),
                small.ferry.rtt_ns.median / small.raw.rtt_ns.median,
                small.ferry.rtt_ns.p99 / small.raw.rtt_ns.p99,
                FormatSize(large.plan.size).c_str(),
                large.ferry.bw_rtt_Bps / large.raw.bw_rtt_Bps);
    if (large.plan.stream_messages > 0) {
      std::printf(", streaming %.2fx",
                  large.ferry.stream_Bps.median / large.raw.stream_Bps.median);
    }
    std::printf("\n");
  }
}

int RunBenchmark(const Options& parsed, const std::string& command) {
  Options o = parsed;
  StartWatchdog(o.timeout_s);
  if (o.pin && (!CpuAllowed(o.cpu_self) || !CpuAllowed(o.cpu_peer) ||
                o.cpu_self == o.cpu_peer)) {
    const std::string why = "CPUs " + std::to_string(o.cpu_self) + " and " +
                            std::to_string(o.cpu_peer) +
                            " are not two distinct CPUs this process may use";
    if (o.cpus_given) return Fail(Status(FERRY_INVALID_ARGUMENT, why));
    std::fprintf(stderr, "warning: %s; running unpinned\n", why.c_str());
    o.pin = false;
  }
  if (o.pin) {
    // Pin before exec'ing the peer; the peer moves itself to its own CPU.
    Status st = PinToCpu(o.cpu_self);
    if (!st.ok()) return Fail(st);
  }

  auto plugin = LoadPlugin(o.plugin);
  if (!plugin.ok()) return Fail(plugin.status());
  const Plugin& p = *plugin.value();

  const std::vector<SizePlan> plan = BuildPlan(o);
  auto buffers = AllocateClientBuffers(MaxSize(plan));
  if (!buffers.ok()) return Fail(buffers.status());

  auto peer = PeerProcess::Spawn(PeerArgs(o));
  if (!peer.ok()) return Fail(peer.status());

  RunInfo run;
  run.command = command;
  run.options = o;
  run.machine = DescribeMachine();
  run.plugin_name = p.name();
  run.plugin_version = p.version();
  run.plugin_path = p.path();
  run.abi_major = p.abi_major();
  run.abi_minor = p.abi_minor();
  run.pinned = o.pin;
  PrintHeader(stdout, run);

  std::vector<SuiteResult> suites;
  for (PollMode mode : o.modes) {
    SuiteResult s;
    Status st = RunSuite(o, plan, plugin.value(), mode, &buffers.value(),
                         &peer.value()->control(), &s);
    if (!st.ok()) {
      // The peer's own message (if it failed first) is already on stderr.
      Fail(st);
      Status peer_st = peer.value()->Wait(2000);
      if (!peer_st.ok()) Fail(peer_st);
      return 1;
    }
    PrintSuite(stdout, run, s);
    suites.push_back(std::move(s));
  }
  Status st = peer.value()->Wait(kSetupTimeoutMs);
  if (!st.ok()) return Fail(st);
  if (o.only.empty()) PrintSummary(suites);
  if (!o.json_path.empty()) {
    st = WriteJson(o.json_path, run, suites);
    if (!st.ok()) return Fail(st);
    std::printf("wrote %s\n", o.json_path.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace ferry::bench

int main(int argc, char** argv) {
  using namespace ferry::bench;
  auto options = ParseOptions(argc, argv);
  if (!options.ok()) {
    if (options.status().code() == FERRY_NOT_FOUND) {  // --help
      std::fputs(options.status().message().c_str(), stdout);
      return 0;
    }
    std::fprintf(stderr, "ferry-bench-transport: %s\n",
                 options.status().message().c_str());
    return 2;
  }
  if (options.value().peer) return RunPeer(options.value());
  return RunBenchmark(options.value(), CommandLine(argc, argv));
}
