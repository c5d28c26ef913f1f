// The benchmark's two outputs: a table for people (stdout) and a JSON file
// with every figure and the machine it was measured on, which
// bench/plot_transport.py turns into a figure and docs/benchmarks/ records.
#pragma once

#include "common/status.h"
#include "transport/machine_info.h"
#include "transport/measure.h"
#include "transport/options.h"
#include "transport/references.h"

#include <array>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace ferry::bench {

// One mode's results, and the ferry context they were measured with.
struct SuiteResult {
  PollMode mode = PollMode::kBusy;
  std::vector<ReferenceInfo> references;       // SizeResult::refs' order
  std::vector<std::string> reference_details;  // how each one ran
  std::vector<SizeResult> sizes;
  uint64_t caps = 0;              // FERRY_CAP_* the context reported
  std::string description;        // the context's one-line description
  bool wakeup_fd = false;
  bool registered = false;        // buffers were registered with reg()
  uint64_t max_inline_size = 0;
  std::array<double, 3> loadavg_before{};
  std::array<double, 3> loadavg_after{};
  double seconds = 0;
};

struct RunInfo {
  std::string command;  // the command line, as typed
  Options options;
  MachineInfo machine;
  std::string plugin_name, plugin_version, plugin_path;
  uint32_t abi_major = 0, abi_minor = 0;
  bool pinned = false;
};

void PrintSuite(std::FILE* out, const RunInfo& run, const SuiteResult& suite);
// One line's worth of ferry/reference ratios for the summary: the smallest
// size's latency, the largest's bandwidth (medians for round-trip
// references, means for batch ones).
void PrintRatioSummary(std::FILE* out, const ReferenceInfo& ref,
                       const SizeResult& small, const SizeResult& large,
                       size_t ref_index);
void PrintHeader(std::FILE* out, const RunInfo& run);
Status WriteJson(const std::string& path, const RunInfo& run,
                 const std::vector<SuiteResult>& suites);

}  // namespace ferry::bench
