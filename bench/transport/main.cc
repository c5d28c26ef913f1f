// ferry-bench-transport: round-trip latency and bandwidth of a transport
// plugin, side by side in one run with references: raw floors written for
// the benchmark (TCP, libfabric) and libfabric's own fi_pingpong.
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
//   references.*        the references by id, their set-up, per-plugin sets
//   raw_tcp_pingpong.*  the raw TCP floor
//   raw_fabric_*        the raw libfabric floor (endpoint, ping-pong)
//   fi_pingpong_reference.*, external_program.*  libfabric's fi_pingpong
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
#include "transport/references.h"
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
  const ReferenceContext context{&o, mode, buffers, control};
  std::vector<std::unique_ptr<ReferenceServer>> refs;
  std::string ready_refs;
  for (const std::string& id : ReferencesFor(o, mode)) {
    auto ref = OpenReferenceServer(id, context);
    if (!ref.ok()) return ref.status();
    ready_refs += " " + ref.value()->address();
    refs.push_back(std::move(ref).value());
  }
  auto ferry = FerryPingPong::Open(plugin, mode, buffers);
  if (!ferry.ok()) return ferry.status();
  auto ferry_address = ferry.value()->Listen(
      o.listen_given ? o.listen
                     : plugin->name() == "tcp" ? "127.0.0.1:0" : "");
  if (!ferry_address.ok()) return ferry_address.status();
  Status st = control->Send("READY " + ferry_address.value() + ready_refs);
  if (!st.ok()) return st;
  // In the order the client connects: the references, then ferry.
  std::vector<ServerSide> sides;
  for (auto& ref : refs) {
    st = ref->Accept(kSetupTimeoutMs);
    if (!st.ok()) return st;
    sides.push_back(o.only == "ferry" ? ServerSide() : ref->side());
  }
  st = ferry.value()->Accept(kSetupTimeoutMs);
  for (size_t i = 0; st.ok() && i < plan.size(); ++i) {
    st = ServeSize(plan[i], o.window, i,
                   o.only == "raw" ? nullptr : ferry.value().get(), sides);
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

int RunPeer(const Options& parsed) {
  g_role = "ferry-bench-transport (peer)";
  Options o = parsed;
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
  Status resolved = ResolveReferences(plugin.value()->name(), &o);
  if (!resolved.ok()) return Fail(resolved);
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
  std::string tag, ferry_address;
  words >> tag >> ferry_address;
  std::vector<std::string> ref_addresses;
  for (std::string a; words >> a;) ref_addresses.push_back(a);
  const std::vector<std::string> ids = ReferencesFor(o, mode);
  if (tag != "READY" || ferry_address.empty() ||
      ref_addresses.size() != ids.size()) {
    return Status(FERRY_INTERNAL, "unexpected control message from the peer: '" +
                                      ready.value() + "'");
  }
  const ReferenceContext context{&o, mode, buffers, control};
  std::vector<std::unique_ptr<ReferenceClient>> refs;
  std::vector<ClientSide> sides;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto ref = ConnectReferenceClient(ids[i], context, ref_addresses[i],
                                      kSetupTimeoutMs);
    if (!ref.ok()) return ref.status();
    out->references.push_back(DescribeReference(ids[i], o));
    out->reference_details.push_back(ref.value()->detail());
    sides.push_back(ref.value()->side());
    if (o.only == "ferry") sides.back() = ClientSide();
    refs.push_back(std::move(ref).value());
  }
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
    st = MeasureSize(plan[i], o.window, i,
                     o.only == "raw" ? nullptr : ferry.value().get(), sides,
                     buffers, &r);
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
  std::printf("\nsummary, ferry / each reference (latency: lower is better for "
              "ferry; bandwidth: higher):\n");
  for (const SuiteResult& s : suites) {
    const SizeResult& small = s.sizes.front();
    const SizeResult& large = s.sizes.back();
    for (size_t k = 0; k < s.references.size(); ++k) {
      std::printf("  %-5s vs %s: ", PollModeName(s.mode),
                  s.references[k].label.c_str());
      PrintRatioSummary(stdout, s.references[k], small, large, k);
      std::printf("\n");
    }
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
  // Before the peer starts: it gets the resolved list and provider.
  Status resolved = ResolveReferences(p.name(), &o);
  if (!resolved.ok()) return Fail(resolved);

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
  if (o.only.empty() && !o.references.empty()) PrintSummary(suites);
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
