// What the figures were measured on. Benchmark numbers without the machine,
// the kernel and the load at the time are not reproducible, so the report
// and the JSON always carry these.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace ferry::bench {

struct MachineInfo {
  long nproc = 0;         // online CPUs
  std::string cpu_model;  // /proc/cpuinfo "model name"
  std::string kernel;     // uname: "Linux 6.1.0-... #1 SMP ..."
  std::string arch;       // uname machine
  std::string hostname;
  uint64_t mem_total_bytes = 0;
  std::string date_utc;    // ISO 8601, when the run started
  std::string compiler;    // of this binary
  std::string build_type;  // CMake configuration of this binary
};

MachineInfo DescribeMachine();

// /proc/loadavg's 1, 5 and 15 minute averages (to show the machine was
// quiet: on 2 CPUs, anything near 1 means a third party was running).
std::array<double, 3> LoadAverage();

std::string UtcNow();

}  // namespace ferry::bench
