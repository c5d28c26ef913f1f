// See stale_shm.h.
#include "stale_shm.h"

#include "ferry_plugin/log.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace ferry_fabric {
namespace {

constexpr double kMarginSeconds = 2.0;

bool AllDigits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// "<pid>:<digits>:<digits>": the pid, or 0 when `name` is not a region's.
pid_t RegionPid(const std::string& name) {
  const size_t a = name.find(':');
  if (a == std::string::npos) return 0;
  const size_t b = name.find(':', a + 1);
  if (b == std::string::npos || !AllDigits(name.substr(0, a)) ||
      !AllDigits(name.substr(a + 1, b - a - 1)) || !AllDigits(name.substr(b + 1)) ||
      a > 9) {
    return 0;
  }
  return static_cast<pid_t>(std::strtol(name.c_str(), nullptr, 10));
}

// This process's start, in seconds since the epoch: /proc/stat's boot time
// plus /proc/self/stat's start time (clock ticks since boot). 0 when either
// cannot be read (then nothing is old enough to be removed).
double ProcessStartTime() {
  std::ifstream stat("/proc/self/stat");
  std::string line;
  if (!std::getline(stat, line)) return 0;
  const size_t paren = line.rfind(')');  // the command name may hold spaces
  if (paren == std::string::npos) return 0;
  std::istringstream fields(line.substr(paren + 2));
  std::string field;
  // Fields 3 .. 22 of proc(5); starttime is the 22nd.
  for (int i = 3; i <= 22; ++i) {
    if (!(fields >> field)) return 0;
  }
  const double ticks = std::strtod(field.c_str(), nullptr);
  std::ifstream proc_stat("/proc/stat");
  double boot = 0;
  while (std::getline(proc_stat, line)) {
    if (line.compare(0, 6, "btime ") == 0) boot = std::strtod(line.c_str() + 6, nullptr);
  }
  const long hz = sysconf(_SC_CLK_TCK);
  if (boot <= 0 || hz <= 0) return 0;
  return boot + ticks / static_cast<double>(hz);
}

}  // namespace

std::vector<std::string> RemoveStaleRegions(const std::string& dir, pid_t self, uid_t uid,
                                            double started,
                                            const std::function<bool(pid_t)>& alive) {
  std::vector<std::string> removed;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return removed;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    const pid_t pid = RegionPid(name);
    if (pid <= 0) continue;
    const std::string path = dir + "/" + name;
    struct stat st;
    if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != uid) {
      continue;
    }
    if (pid == self) {
      const double changed = static_cast<double>(st.st_ctim.tv_sec) +
                             static_cast<double>(st.st_ctim.tv_nsec) / 1e9;
      if (changed >= started - kMarginSeconds) continue;  // ours
    } else if (alive(pid)) {
      continue;
    }
    if (unlink(path.c_str()) == 0) removed.push_back(name);
  }
  closedir(d);
  return removed;
}

void RemoveStaleShmRegions() {
  const double started = ProcessStartTime();
  if (started <= 0) return;
  const auto alive = [](pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; };
  for (const std::string& name :
       RemoveStaleRegions("/dev/shm", getpid(), geteuid(), started, alive)) {
    FERRY_PLUGIN_LOG(FERRY_LOG_INFO,
                     "removed /dev/shm/%s: a shared-memory region of libfabric's shm "
                     "provider whose process died without closing it",
                     name.c_str());
  }
}

}  // namespace ferry_fabric
