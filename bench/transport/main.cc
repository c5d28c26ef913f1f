// ferry-bench-transport: round-trip latency and bandwidth of a transport
// plugin, side by side in one run with the references for that plugin
// (reference.h): a raw floor written for the benchmark, and other libraries'
// transports where the machine has them.
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
//   buffers.*           pre-faulted buffers shared by every implementation
//   reference*.*        which references a plugin is measured against
//   raw_tcp_pingpong.*  the raw TCP floor (tcp, and plugins without their own)
//   raw_shm_pingpong.*  the raw shared-memory ring floor (shm)
//   tensorpipe_pingpong.*  TensorPipe's shm transport (shm; when installed)
//   fabric_references.* the fabric plugin's: raw_fabric_* (a raw libfabric
//                       floor), fi_pingpong_reference.* + external_program.*
//                       (libfabric's fi_pingpong, a batch reference)
//   ferry_pingpong.*    the same exchanges through the loader + Transport
//   measure.*           the single timing loop they all go through
//   stats.*             median / p99
//   report.*            table and JSON; machine_info.* what it ran on
#include "loader/plugin_loader.h"
#include "transport/buffers.h"
#include "transport/external_program.h"
#include "transport/fabric_references.h"
#include "transport/ferry_pingpong.h"
#include "transport/machine_info.h"
#include "transport/measure.h"
#include "transport/options.h"
#include "transport/peer_process.h"
#include "transport/plan.h"
#include "transport/reference.h"
#include "transport/report.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
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
  static const char msg[] = "ferry-bench-transport: --timeout expired, aborting\n";
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
// Passes: what is set up, measured and torn down together. The first pass
// holds ferry and every reference that can share the machine with it (their
// rounds alternate, size by size); each `isolated` reference gets a pass of
// its own after it. Both processes derive the same passes from the same
// options and plugin.
// --------------------------------------------------------------------------
struct Pass {
  bool ferry = false;
  std::vector<size_t> references;  // indices into ReferenceSet::measured
};

std::vector<Pass> PlanPasses(const ReferenceSet& refs, const Options& o) {
  auto wanted = [&](const std::string& key) { return o.only.empty() || o.only == key; };
  std::vector<Pass> passes(1);
  passes[0].ferry = wanted("ferry");
  for (size_t i = 0; i < refs.measured.size(); ++i) {
    const ReferenceInfo& info = refs.measured[i]->info();
    if (!wanted(info.key)) continue;
    if (info.isolated) {
      passes.push_back(Pass{false, {i}});
    } else {
      passes[0].references.push_back(i);
    }
  }
  if (!passes[0].ferry && passes[0].references.empty()) {
    passes.erase(passes.begin());
  }
  return passes;
}

std::string PassLabel(const Pass& pass, const ReferenceSet& refs) {
  std::string out;
  for (size_t i : pass.references) {
    out += (out.empty() ? "" : "+") + refs.measured[i]->info().key;
  }
  if (pass.ferry) out += out.empty() ? "ferry" : "+ferry";
  return out;
}

// "READY key=address ..." -> address by key.
StatusOr<std::map<std::string, std::string>> ParseReady(const std::string& line) {
  std::istringstream words(line);
  std::string tag, word;
  words >> tag;
  std::map<std::string, std::string> out;
  while (words >> word) {
    const size_t eq = word.find('=');
    if (eq == std::string::npos) break;
    out[word.substr(0, eq)] = word.substr(eq + 1);
  }
  if (tag != "READY") {
    return Status(FERRY_INTERNAL,
                  "unexpected control message from the peer: '" + line + "'");
  }
  return out;
}

Status CheckAddress(const std::string& key, const std::string& address) {
  if (!address.empty() && address.find_first_of(" \t\n") == std::string::npos) {
    return Status();
  }
  return Status(FERRY_INTERNAL, key + "'s listen address '" + address +
                                    "' cannot travel in a control line");
}

// --------------------------------------------------------------------------
// The peer: echoes the client's schedule, pass by pass, one suite per mode.
// --------------------------------------------------------------------------
Status ServePass(const Options& o, const std::vector<SizePlan>& plan,
                 std::shared_ptr<const Plugin> plugin, PollMode mode,
                 const ReferenceSet& refs, const Pass& pass, BufferSet* buffers,
                 ControlChannel* control) {
  std::string ready = "READY";
  std::vector<std::unique_ptr<ReferenceListener>> listeners;
  std::vector<std::unique_ptr<BatchPingPongServer>> batches;
  for (size_t i : pass.references) {
    const std::string& key = refs.measured[i]->info().key;
    if (refs.measured[i]->info().batch) {
      // Set up per run over the control channel; busy mode only (it spins).
      listeners.push_back(nullptr);
      if (mode != PollMode::kBusy) continue;
      auto batch = refs.measured[i]->ListenBatch(control);
      if (!batch.ok()) return batch.status();
      batches.push_back(std::move(batch).value());
      continue;
    }
    auto listener = refs.measured[i]->Listen(mode, buffers);
    if (!listener.ok()) return listener.status();
    Status st = CheckAddress(key, listener.value()->address());
    if (!st.ok()) return st;
    ready += " " + key + "=" + listener.value()->address();
    listeners.push_back(std::move(listener).value());
  }
  std::unique_ptr<FerryPingPong> ferry;
  if (pass.ferry) {
    auto opened = FerryPingPong::Open(plugin, mode, buffers);
    if (!opened.ok()) return opened.status();
    ferry = std::move(opened).value();
    auto address = ferry->Listen(o.listen_given            ? o.listen
                                 : plugin->name() == "tcp" ? "127.0.0.1:0"
                                                           : "");
    if (!address.ok()) return address.status();
    Status st = CheckAddress("ferry", address.value());
    if (!st.ok()) return st;
    ready += " ferry=" + address.value();
  }
  Status st = control->Send(ready);
  if (!st.ok()) return st;
  // The client connects everything before it waits for anything, so
  // accepting in this order never waits on a connection not yet made.
  std::vector<std::unique_ptr<PingPongServer>> servers;
  std::vector<PingPongServer*> sides;
  std::vector<BatchPingPongServer*> batch_sides;
  for (auto& b : batches) batch_sides.push_back(b.get());
  for (auto& listener : listeners) {
    if (listener == nullptr) {  // a batch reference keeps its place
      sides.push_back(nullptr);
      continue;
    }
    auto server = listener->Accept(kSetupTimeoutMs);
    if (!server.ok()) return server.status();
    sides.push_back(server.value().get());
    servers.push_back(std::move(server).value());
  }
  if (ferry) {
    st = ferry->Accept(kSetupTimeoutMs);
    if (!st.ok()) return st;
    sides.push_back(ferry.get());
  }
  for (size_t i = 0; st.ok() && i < plan.size(); ++i) {
    st = ServeSize(plan[i], o.window, i, buffers, sides, batch_sides);
  }
  if (!st.ok()) return st;
  // Close only once the client has consumed the last reply: a close racing
  // the final echo would show up on the client as a broken connection.
  auto finished = control->Receive(kSetupTimeoutMs);
  if (!finished.ok()) return finished.status();
  if (ferry) {
    st = ferry->Close(kSetupTimeoutMs);
    if (!st.ok()) return st;
  }
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
  Status resolved = ResolveFabricProvider(plugin.value()->name(), &o);
  if (!resolved.ok()) return Fail(resolved);
  const ReferenceSet refs = ReferencesFor(plugin.value()->name(), o);
  const std::vector<Pass> passes = PlanPasses(refs, o);
  const std::vector<SizePlan> plan = BuildPlan(o);
  auto buffers = AllocatePeerBuffers(MaxSize(plan), o.stream ? o.window : 1);
  if (!buffers.ok()) return Fail(buffers.status());
  for (PollMode mode : o.modes) {
    for (const Pass& pass : passes) {
      Status st = ServePass(o, plan, plugin.value(), mode, refs, pass, &buffers.value(),
                            &control);
      if (!st.ok()) return Fail(st);
    }
  }
  return 0;
}

// --------------------------------------------------------------------------
// The client: connects to the peer's listeners and times everything.
// --------------------------------------------------------------------------
Status RunPass(const Options& o, const std::vector<SizePlan>& plan,
               std::shared_ptr<const Plugin> plugin, PollMode mode,
               const ReferenceSet& refs, const Pass& pass, BufferSet* buffers,
               ControlChannel* control, std::FILE* samples_file, SuiteResult* out) {
  // The peer's "READY" may take a while the first time: it pre-faults its
  // buffers (hundreds of MiB with the default sizes).
  auto ready = control->Receive(4 * kSetupTimeoutMs);
  if (!ready.ok()) return ready.status();
  auto addresses = ParseReady(ready.value());
  if (!addresses.ok()) return addresses.status();
  auto address_of = [&](const std::string& key) -> StatusOr<std::string> {
    auto it = addresses.value().find(key);
    if (it == addresses.value().end()) {
      return Status(FERRY_INTERNAL,
                    "the peer's '" + ready.value() + "' has no address for " + key);
    }
    return it->second;
  };

  std::vector<std::unique_ptr<PingPongClient>> clients;
  std::vector<std::unique_ptr<BatchPingPongClient>> batches;
  std::vector<Contender> contenders;
  for (size_t i : pass.references) {
    const ReferenceInfo& info = refs.measured[i]->info();
    if (info.batch) {
      // Keeps its place; measured in busy mode only (it spins).
      contenders.push_back({info.label.c_str(), nullptr, nullptr});
      if (mode != PollMode::kBusy) continue;
      auto batch = refs.measured[i]->ConnectBatch(control);
      if (!batch.ok()) return batch.status();
      batches.push_back(std::move(batch).value());
      contenders.back().batch = batches.back().get();
      continue;
    }
    auto address = address_of(info.key);
    if (!address.ok()) return address.status();
    auto client = refs.measured[i]->Connect(address.value(), mode, buffers);
    if (!client.ok()) return client.status();
    clients.push_back(std::move(client).value());
    contenders.push_back({info.label.c_str(), clients.back().get(), nullptr});
  }
  std::unique_ptr<FerryPingPong> ferry;
  if (pass.ferry) {
    auto address = address_of("ferry");
    if (!address.ok()) return address.status();
    auto opened = FerryPingPong::Open(plugin, mode, buffers);
    if (!opened.ok()) return opened.status();
    ferry = std::move(opened).value();
    Status st = ferry->Connect(address.value(), kSetupTimeoutMs);
    if (!st.ok()) return st;
    const Transport& t = ferry->transport();
    out->caps = t.info().caps;
    out->description = t.description();
    out->wakeup_fd = t.info().wakeup_fd >= 0;
    out->registered = ferry->registered();
    out->max_inline_size = t.info().max_inline_size;
    if (mode == PollMode::kSleep && t.HasCap(FERRY_CAP_BUSY_POLL)) {
      std::fprintf(stderr,
                   "warning: the plugin reports busy-poll in sleep mode; the "
                   "sleep figures are busy-poll figures\n");
    }
    contenders.push_back({"ferry", ferry.get(), nullptr});
  }

  PassResult record;
  record.label = PassLabel(pass, refs);
  const SampleLog samples{samples_file, PollModeName(mode)};
  record.loadavg_before = LoadAverage();
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < plan.size(); ++i) {
    SizeResult& r = out->sizes[i];
    for (size_t k = 0; k < pass.references.size(); ++k) {
      contenders[k].result = &r.references[pass.references[k]];
    }
    if (ferry) contenders.back().result = &r.ferry;
    Status st = MeasureSize(plan[i], o.window, i, contenders, buffers, samples);
    if (!st.ok()) {
      return Status(st.code(), "mode " + std::string(PollModeName(mode)) + ", size " +
                                   FormatSize(plan[i].size) + ": " + st.message());
    }
  }
  record.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  record.loadavg_after = LoadAverage();
  out->passes.push_back(record);
  // Orderly shutdown: this side says FINISHED once it has every reply; the
  // peer then closes its end and says DONE; only then does this side close.
  // Neither side ever sees the other's close while it still expects data.
  Status st = control->Send("FINISHED");
  if (!st.ok()) return st;
  auto done = control->Receive(kSetupTimeoutMs);
  if (!done.ok()) return done.status();
  return ferry ? ferry->Close(kSetupTimeoutMs) : Status();
}

Status RunSuite(const Options& o, const std::vector<SizePlan>& plan,
                std::shared_ptr<const Plugin> plugin, PollMode mode,
                const ReferenceSet& refs, const std::vector<Pass>& passes,
                BufferSet* buffers, ControlChannel* control, std::FILE* samples_file,
                SuiteResult* out) {
  out->mode = mode;
  out->sizes.resize(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    out->sizes[i].plan = plan[i];
    out->sizes[i].references.resize(refs.measured.size());
  }
  for (const Pass& pass : passes) {
    Status st =
        RunPass(o, plan, plugin, mode, refs, pass, buffers, control, samples_file, out);
    if (!st.ok()) return st;
  }
  return Status();
}

int RunBenchmark(const Options& parsed, const std::string& command) {
  Options o = parsed;
  StartWatchdog(o.timeout_s);
  if (o.pin &&
      (!CpuAllowed(o.cpu_self) || !CpuAllowed(o.cpu_peer) || o.cpu_self == o.cpu_peer)) {
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
  // Before the peer starts: it gets the provider in its arguments.
  Status resolved = ResolveFabricProvider(p.name(), &o);
  if (!resolved.ok()) return Fail(resolved);
  const ReferenceSet refs = ReferencesFor(p.name(), o);
  if (!o.only.empty() && o.only != "ferry") {
    bool known = false;
    std::string keys = "ferry";
    for (const auto& r : refs.measured) {
      known = known || r->info().key == o.only;
      keys += ", " + r->info().key;
    }
    if (!known) {
      return Fail(Status(FERRY_INVALID_ARGUMENT,
                         "--only " + o.only + ": the " + p.name() +
                             " plugin is measured against no such reference "
                             "(this build has: " +
                             keys + ")"));
    }
  }
  const std::vector<Pass> passes = PlanPasses(refs, o);
  // --samples: one file for the whole run, every pass writing in turn.
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> samples_file(nullptr, &std::fclose);
  if (!o.samples_path.empty()) {
    samples_file.reset(std::fopen(o.samples_path.c_str(), "w"));
    if (samples_file == nullptr) {
      return Fail(Status(FERRY_INVALID_ARGUMENT, "--samples " + o.samples_path +
                                                     ": cannot create it (" +
                                                     std::strerror(errno) + ")"));
    }
  }

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
  for (const auto& r : refs.measured) run.references.push_back(r->info());
  run.skipped = refs.skipped;
  PrintHeader(stdout, run);

  std::vector<SuiteResult> suites;
  for (PollMode mode : o.modes) {
    SuiteResult s;
    Status st = RunSuite(o, plan, plugin.value(), mode, refs, passes, &buffers.value(),
                         &peer.value()->control(), samples_file.get(), &s);
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
  if (o.only.empty()) PrintSummary(stdout, run, suites);
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
  if (argc > 1 && std::strcmp(argv[1], kExecReferenceFlag) == 0) {
    return ExecReference(argc, argv);  // starting fi_pingpong: not a benchmark
  }
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
  // libfabric's tcp provider binds the first interface it finds (eth0 on a
  // cloud VM). Both processes are on this host, so keep the traffic on the
  // loopback interface, for ferry, the raw floor and fi_pingpong alike (the
  // peer and fi_pingpong inherit it), unless the caller chose one.
  setenv("FI_TCP_IFACE", "lo", /*overwrite=*/0);
  if (options.value().peer) return RunPeer(options.value());
  return RunBenchmark(options.value(), CommandLine(argc, argv));
}
