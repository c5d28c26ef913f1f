// The benchmark's two outputs: tables for people (stdout) and a JSON file
// with every figure and the machine it was measured on, which
// bench/plot_transport.py turns into a figure and docs/benchmarks/ records.
// Ratios are always ferry / reference: below 1 is faster for latency, above
// 1 is faster for bandwidth.
#pragma once

#include "common/status.h"
#include "transport/machine_info.h"
#include "transport/measure.h"
#include "transport/options.h"
#include "transport/reference.h"

#include <array>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace ferry::bench {

// One pass of a suite: the implementations measured together (main.cc).
struct PassResult {
  std::string label;  // "raw+ferry", "tensorpipe"
  std::array<double, 3> loadavg_before{};
  std::array<double, 3> loadavg_after{};
  double seconds = 0;
};

// One mode's results, and the ferry context they were measured with.
struct SuiteResult {
  PollMode mode = PollMode::kBusy;
  std::vector<SizeResult> sizes;
  uint64_t caps = 0;        // FERRY_CAP_* the context reported
  std::string description;  // the context's one-line description
  bool wakeup_fd = false;
  bool registered = false;  // buffers were registered with reg()
  uint64_t max_inline_size = 0;
  std::vector<PassResult> passes;
};

struct RunInfo {
  std::string command;  // the command line, as typed
  Options options;
  MachineInfo machine;
  std::string plugin_name, plugin_version, plugin_path;
  uint32_t abi_major = 0, abi_minor = 0;
  bool pinned = false;
  std::vector<ReferenceInfo> references;  // SizeResult::references' order
  std::vector<SkippedReference> skipped;  // not in this build
};

void PrintHeader(std::FILE* out, const RunInfo& run);
void PrintSuite(std::FILE* out, const RunInfo& run, const SuiteResult& suite);
// ferry / each reference at the smallest and the largest size, per mode.
void PrintSummary(std::FILE* out, const RunInfo& run,
                  const std::vector<SuiteResult>& suites);
Status WriteJson(const std::string& path, const RunInfo& run,
                 const std::vector<SuiteResult>& suites);

}  // namespace ferry::bench
