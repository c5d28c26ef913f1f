#include "transport/options.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <sstream>

namespace ferry::bench {
namespace {

constexpr uint64_t kMaxSize = 1ull << 30;  // one message; memory is the limit

std::vector<std::string> Split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, sep)) out.push_back(item);
  return out;
}

bool ParseUint(const std::string& text, uint64_t* out) {
  if (text.empty() || text[0] == '-') return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0') return false;
  *out = v;
  return true;
}

Status Bad(const std::string& message) {
  return Status(FERRY_INVALID_ARGUMENT, message + " (see --help)");
}

}  // namespace

bool ParseSize(const std::string& text, uint64_t* out) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') {
    ++digits;
  }
  uint64_t value = 0;
  if (digits == 0 || !ParseUint(text.substr(0, digits), &value)) return false;
  std::string unit = text.substr(digits);
  uint64_t scale = 1;
  if (unit.empty() || unit == "B") {
    scale = 1;
  } else if (unit == "K" || unit == "k" || unit == "KiB") {
    scale = 1ull << 10;
  } else if (unit == "M" || unit == "MiB") {
    scale = 1ull << 20;
  } else if (unit == "G" || unit == "GiB") {
    scale = 1ull << 30;
  } else {
    return false;
  }
  if (value > (~0ull) / scale) return false;
  *out = value * scale;
  return true;
}

std::string FormatSize(uint64_t bytes) {
  if (bytes >= (1ull << 30) && bytes % (1ull << 30) == 0) {
    return std::to_string(bytes >> 30) + "G";
  }
  if (bytes >= (1ull << 20) && bytes % (1ull << 20) == 0) {
    return std::to_string(bytes >> 20) + "M";
  }
  if (bytes >= (1ull << 10) && bytes % (1ull << 10) == 0) {
    return std::to_string(bytes >> 10) + "K";
  }
  return std::to_string(bytes);
}

std::string Usage() {
  return "usage: ferry-bench-transport --plugin NAME|PATH [options]\n"
         "\n"
         "Round-trip latency (median, p99) and bandwidth of a transport plugin,\n"
         "measured in the same run against the references for that plugin, between\n"
         "this process and a peer process it execs. tcp (and any plugin without\n"
         "references of its own): a raw TCP ping-pong floor written for this\n"
         "benchmark; shm: a raw shared-memory ring floor, and TensorPipe's shm\n"
         "transport with its basic channel where libtensorpipe was found at build.\n"
         "\n"
         "  --plugin NAME|PATH  transport plugin: a name (\"tcp\") found by the\n"
         "                      plugin loader, or a path to a libferry-*.so\n"
         "  --sizes LIST        message sizes, e.g. 64,4K,1M (default: 64 B to\n"
         "                      64 MiB in powers of 4)\n"
         "  --iters N           timed round trips per size (default 10000; large\n"
         "                      sizes get fewer: see --budget, never fewer than 20)\n"
         "  --budget BYTES      bytes per direction per size and side for the\n"
         "                      timed round trips (default 1G)\n"
         "  --rounds N          split each size's round trips into N rounds,\n"
         "                      raw and ferry alternating, so slow drifts of the\n"
         "                      machine hit both alike (default: one round per\n"
         "                      500 round trips, from 4 to 20)\n"
         "  --mode busy|sleep|both\n"
         "                      busy: every side spins (ferry on progress());\n"
         "                      sleep: every side blocks when it has nothing to\n"
         "                      do (ferry: poll() on the wakeup fd) (default both)\n"
         "  --cpus A,B          pin this process to CPU A and the peer to CPU B\n"
         "                      (default 0,1; 'none' disables pinning)\n"
         "  --window W          messages in flight in the streaming test\n"
         "                      (default 8)\n"
         "  --stream-min SIZE   smallest size that also gets a streaming test\n"
         "                      (default 64K)\n"
         "  --no-stream         round trips only\n"
         "  --json FILE         write every figure and the machine description\n"
         "  --samples FILE      write every timed round trip, one line per\n"
         "                      implementation and round, in order (to place a\n"
         "                      tail within its round: see\n"
         "                      bench/transport/samples_by_position.py)\n"
         "  --only NAME         measure one side alone (for profiling it with\n"
         "                      strace -c or valgrind): ferry, raw (the plugin's\n"
         "                      raw floor) or another reference (tensorpipe,\n"
         "                      fi_pingpong); no ratios\n"
         "  --fabric-provider P libfabric provider of the fabric plugin and its\n"
         "                      references (default: $FERRY_FABRIC_PROVIDER, else\n"
         "                      libfabric's first RDM provider)\n"
         "  --raw-fabric-path auto|rma|msg\n"
         "                      the raw libfabric floor moves each message with\n"
         "                      one RMA write (rma) or one send (msg); auto: rma\n"
         "                      when the provider has FI_RMA (default auto)\n"
         "  --timeout SECONDS   abort the whole run after this long (default 900)\n"
         "  --listen ADDRESS    the plugin's listen address (default 127.0.0.1:0\n"
         "                      for tcp, otherwise the plugin's own choice)\n"
         "  --help              this text\n";
}

StatusOr<Options> ParseOptions(int argc, char** argv) {
  Options o;
  std::string mode = "both";
  std::string sizes = "64,256,1K,4K,16K,64K,256K,1M,4M,16M,64M";
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](std::string* out) -> bool {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    std::string v;
    uint64_t n = 0;
    if (arg == "--help" || arg == "-h") {
      return Status(FERRY_NOT_FOUND, Usage());
    } else if (arg == "--plugin") {
      if (!value(&o.plugin) || o.plugin.empty()) {
        return Bad("--plugin needs a name or a path");
      }
    } else if (arg == "--sizes") {
      if (!value(&sizes)) return Bad("--sizes needs a list such as 64,4K,1M");
    } else if (arg == "--iters") {
      if (!value(&v) || !ParseUint(v, &n) || n == 0 || n > 100000000) {
        return Bad("--iters needs a count between 1 and 100000000");
      }
      o.iters = static_cast<uint32_t>(n);
      o.min_iters = std::min(o.min_iters, o.iters);
    } else if (arg == "--rounds") {
      if (!value(&v) || !ParseUint(v, &n) || n == 0 || n > 1000) {
        return Bad("--rounds needs a count between 1 and 1000");
      }
      o.rounds = static_cast<uint32_t>(n);
    } else if (arg == "--budget") {
      if (!value(&v) || !ParseSize(v, &o.budget) || o.budget == 0) {
        return Bad("--budget needs a size such as 1G");
      }
    } else if (arg == "--mode") {
      if (!value(&mode)) return Bad("--mode needs busy, sleep or both");
    } else if (arg == "--json") {
      if (!value(&o.json_path) || o.json_path.empty()) {
        return Bad("--json needs a file name");
      }
    } else if (arg == "--samples") {
      if (!value(&o.samples_path) || o.samples_path.empty()) {
        return Bad("--samples needs a file name");
      }
    } else if (arg == "--cpus") {
      if (!value(&v)) return Bad("--cpus needs A,B or none");
      o.cpus_given = true;
      if (v == "none") {
        o.pin = false;
      } else {
        auto parts = Split(v, ',');
        uint64_t a = 0, b = 0;
        if (parts.size() != 2 || !ParseUint(parts[0], &a) || !ParseUint(parts[1], &b) ||
            a >= 4096 || b >= 4096) {
          return Bad("--cpus needs two CPU numbers such as 0,1 (or none)");
        }
        o.cpu_self = static_cast<int>(a);
        o.cpu_peer = static_cast<int>(b);
      }
    } else if (arg == "--window") {
      if (!value(&v) || !ParseUint(v, &n) || n == 0 || n > 1024) {
        return Bad("--window needs a count between 1 and 1024");
      }
      o.window = static_cast<uint32_t>(n);
    } else if (arg == "--stream-min") {
      if (!value(&v) || !ParseSize(v, &o.stream_min)) {
        return Bad("--stream-min needs a size such as 64K");
      }
    } else if (arg == "--no-stream") {
      o.stream = false;
    } else if (arg == "--timeout") {
      if (!value(&v) || !ParseUint(v, &n) || n == 0 || n > 86400) {
        return Bad("--timeout needs seconds between 1 and 86400");
      }
      o.timeout_s = static_cast<uint32_t>(n);
    } else if (arg == "--listen") {
      if (!value(&o.listen)) return Bad("--listen needs an address");
      o.listen_given = true;
    } else if (arg == "--only") {
      // Reference names depend on the plugin: main.cc checks them.
      if (!value(&o.only) || o.only.empty()) {
        return Bad("--only needs ferry, raw or another reference's name");
      }
    } else if (arg == "--fabric-provider") {
      if (!value(&o.fabric_provider) || o.fabric_provider.empty()) {
        return Bad("--fabric-provider needs a provider such as 'tcp;ofi_rxm'");
      }
    } else if (arg == "--raw-fabric-path") {
      if (!value(&o.raw_fabric_path) ||
          (o.raw_fabric_path != "auto" && o.raw_fabric_path != "rma" &&
           o.raw_fabric_path != "msg")) {
        return Bad("--raw-fabric-path needs auto, rma or msg");
      }
    } else if (arg == "--peer") {
      o.peer = true;
    } else if (arg == "--control-fd") {
      if (!value(&v) || !ParseUint(v, &n) || n > 65535) {
        return Bad("--control-fd needs a file descriptor");
      }
      o.control_fd = static_cast<int>(n);
    } else {
      return Bad("unknown argument '" + arg + "'");
    }
  }
  if (o.plugin.empty()) return Bad("--plugin is required");
  if (mode == "busy") {
    o.modes = {PollMode::kBusy};
  } else if (mode == "sleep") {
    o.modes = {PollMode::kSleep};
  } else if (mode == "both") {
    o.modes = {PollMode::kBusy, PollMode::kSleep};
  } else {
    return Bad("--mode must be busy, sleep or both, not '" + mode + "'");
  }
  for (const std::string& s : Split(sizes, ',')) {
    uint64_t bytes = 0;
    if (!ParseSize(s, &bytes) || bytes == 0 || bytes > kMaxSize) {
      return Bad("--sizes: '" + s + "' is not a size between 1 and 1G");
    }
    o.sizes.push_back(bytes);
  }
  if (o.sizes.empty()) return Bad("--sizes is empty");
  std::sort(o.sizes.begin(), o.sizes.end());
  o.sizes.erase(std::unique(o.sizes.begin(), o.sizes.end()), o.sizes.end());
  if (o.peer && o.control_fd < 0) return Bad("--peer needs --control-fd");
  return o;
}

std::vector<std::string> PeerArgs(const Options& o) {
  std::string sizes;
  for (uint64_t s : o.sizes) {
    if (!sizes.empty()) sizes += ",";
    sizes += std::to_string(s);
  }
  std::string mode = o.modes.size() == 2 ? "both" : PollModeName(o.modes[0]);
  std::vector<std::string> args = {"--peer",
                                   "--plugin",
                                   o.plugin,
                                   "--sizes",
                                   sizes,
                                   "--iters",
                                   std::to_string(o.iters),
                                   "--budget",
                                   std::to_string(o.budget),
                                   "--mode",
                                   mode,
                                   "--window",
                                   std::to_string(o.window),
                                   "--stream-min",
                                   std::to_string(o.stream_min),
                                   "--timeout",
                                   std::to_string(o.timeout_s)};
  if (!o.stream) args.push_back("--no-stream");
  if (o.rounds != 0) {  // 0: by size, decided alike on both sides
    args.push_back("--rounds");
    args.push_back(std::to_string(o.rounds));
  }
  if (!o.only.empty()) {
    args.push_back("--only");
    args.push_back(o.only);
  }
  if (o.listen_given) {
    args.push_back("--listen");
    args.push_back(o.listen);
  }
  if (!o.fabric_provider.empty()) {
    args.push_back("--fabric-provider");
    args.push_back(o.fabric_provider);
  }
  args.push_back("--raw-fabric-path");
  args.push_back(o.raw_fabric_path);
  args.push_back("--cpus");
  args.push_back(o.pin ? std::to_string(o.cpu_self) + "," + std::to_string(o.cpu_peer)
                       : "none");
  return args;
}

}  // namespace ferry::bench
