// Command-line options of ferry-bench-transport. The peer process receives
// the same options (PeerArgs) and so derives the same schedule (plan.h)
// without a negotiation step: both sides know every size and count up front.
#pragma once

#include "common/status.h"
#include "transport/pingpong.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ferry::bench {

struct Options {
  std::string plugin;            // --plugin: name ("tcp") or path to a .so
  std::vector<uint64_t> sizes;   // --sizes, bytes, ascending
  uint32_t iters = 10000;        // --iters: timed round trips per size (cap)
  uint64_t budget = 1ull << 30;  // --budget: bytes per direction per size
  uint32_t min_iters = 20;       // floor on timed round trips per size
  uint32_t rounds = 0;           // --rounds: raw/ferry alternations per size
                                 // (0: by size, see plan.cc)
  std::vector<PollMode> modes;   // --mode busy|sleep|both
  std::string json_path;         // --json FILE ("" = no JSON)
  std::string samples_path;      // --samples FILE: every round trip (measure.h)
  bool pin = true;               // --cpus none turns pinning off
  bool cpus_given = false;       // --cpus was on the command line
  int cpu_self = 0;              // --cpus A,B
  int cpu_peer = 1;
  uint32_t window = 8;              // --window: streaming messages in flight
  uint64_t stream_min = 64 * 1024;  // --stream-min: smallest streamed size
  bool stream = true;               // --no-stream
  uint32_t stream_reps = 5;         // bursts per streamed size
  uint32_t timeout_s = 900;         // --timeout: whole-run watchdog
  // --listen: the plugin listener's address. Default (ListenAddress in
  // main.cc): 127.0.0.1:0 for tcp, like the raw floor; "" (the plugin's own
  // choice) for any other plugin.
  std::string listen;
  bool listen_given = false;
  // --only ferry|raw|<reference key>: measure one side alone, to profile it
  // (strace -c, valgrind) without the others' calls mixed in. No ratios.
  std::string only;
  // --fabric-provider: the libfabric provider of the fabric plugin and of its
  // references (fabric_references.h), so all run on the same one. Default:
  // FERRY_FABRIC_PROVIDER, else libfabric's first RDM provider.
  std::string fabric_provider;
  // --raw-fabric-path auto|rma|msg: how the raw libfabric floor moves data.
  std::string raw_fabric_path = "auto";

  // Hidden: set in the process that the benchmark execs as its peer.
  bool peer = false;
  int control_fd = -1;
};

// Parses argv. Returns INVALID_ARGUMENT with a message naming the bad flag.
// `--help` yields NOT_FOUND with the usage text as its message.
StatusOr<Options> ParseOptions(int argc, char** argv);
std::string Usage();

// The argument vector (without argv[0] and --control-fd) for the peer
// process: the same schedule, and the pinning decision the parent made.
std::vector<std::string> PeerArgs(const Options& options);

// "64", "4K", "1M", "64MiB" -> bytes; false when unparsable.
bool ParseSize(const std::string& text, uint64_t* out);
// 65536 -> "64K", 100 -> "100".
std::string FormatSize(uint64_t bytes);

}  // namespace ferry::bench
