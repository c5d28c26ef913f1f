#include "transport/machine_info.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>

#ifndef FERRY_BENCH_BUILD_TYPE
#define FERRY_BENCH_BUILD_TYPE "unknown"
#endif

namespace ferry::bench {
namespace {

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        size_t start = line.find_first_not_of(' ', colon + 1);
        return start == std::string::npos ? "" : line.substr(start);
      }
    }
  }
  return "unknown";
}

uint64_t MemTotal() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  while (in >> key) {
    if (key == "MemTotal:") {
      in >> kib;
      return kib * 1024;
    }
    in.ignore(1 << 16, '\n');
  }
  return 0;
}

}  // namespace

std::string UtcNow() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

MachineInfo DescribeMachine() {
  MachineInfo m;
  m.nproc = sysconf(_SC_NPROCESSORS_ONLN);
  m.cpu_model = CpuModel();
  utsname u{};
  if (uname(&u) == 0) {
    m.kernel = std::string(u.sysname) + " " + u.release + " " + u.version;
    m.arch = u.machine;
  }
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) == 0) m.hostname = host;
  m.mem_total_bytes = MemTotal();
  m.date_utc = UtcNow();
#if defined(__clang__)
  m.compiler = "clang " __clang_version__;
#elif defined(__GNUC__)
  m.compiler = "gcc " __VERSION__;
#endif
  m.build_type = FERRY_BENCH_BUILD_TYPE;
  return m;
}

std::array<double, 3> LoadAverage() {
  std::array<double, 3> load{-1, -1, -1};
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) {
      load = {-1, -1, -1};
    }
    std::fclose(f);
  }
  return load;
}

}  // namespace ferry::bench
