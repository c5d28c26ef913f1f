// The debug-dump signal (debug_signal.h).
#include "agent/debug_signal.h"

#include "agent/agent.h"
#include "common/log.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ferry::debug_signal {
namespace {

constexpr const char* kLog = "debug";

// The write end of the pipe the handler pokes; -1 until installed.
int g_poke_fd = -1;

void OnSignal(int) {
  const int saved = errno;
  const char byte = 1;
  // Nonblocking: a full pipe already has a dump coming.
  ssize_t n = write(g_poke_fd, &byte, 1);
  (void)n;
  errno = saved;
}

struct Registry {
  std::mutex mu;
  bool installed = false;  // or given up on
  std::vector<std::weak_ptr<Agent>> agents;
};
// Never destroyed: the dump thread may outlive static destruction.
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

// FERRY_DEBUG_SIGNAL as a signal number; 0 = off. Logs what it refuses.
int ChosenSignal() {
  const char* v = std::getenv("FERRY_DEBUG_SIGNAL");
  if (v == nullptr || *v == '\0') return SIGUSR1;
  std::string s = v;
  if (s == "off" || s == "none" || s == "0") return 0;
  if (s.rfind("SIG", 0) == 0) s = s.substr(3);
  if (s == "USR1") return SIGUSR1;
  if (s == "USR2") return SIGUSR2;
  char* end = nullptr;
  const long n = std::strtol(s.c_str(), &end, 10);
  if (end != s.c_str() && *end == '\0' && n > 0 && n < NSIG && n != SIGKILL &&
      n != SIGSTOP) {
    return static_cast<int>(n);
  }
  FERRY_LOG(FERRY_LOG_WARN, kLog,
            std::string("FERRY_DEBUG_SIGNAL='") + v +
                "' is not USR1, USR2, a signal number or 'off': no debug-dump signal");
  return 0;
}

// Writes all of `text` to `fd`.
void WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// Only letters, digits, '-', '_' and '.' of a name go into a file name.
std::string FileSafe(const std::string& s) {
  std::string out = s;
  for (char& c : out) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
      c = '_';
  }
  return out;
}

void DumpOne(Agent& agent, int signo) {
  const std::string text = agent.DebugDump().dump(2) + "\n";
  WriteAll(2, "--- ferry debug dump of worker '" + agent.name() + "' (job '" +
                  agent.job() + "', pid " + std::to_string(getpid()) + ", signal " +
                  std::to_string(signo) + ") ---\n" + text +
                  "--- end of the debug dump ---\n");
  const char* dir = std::getenv("FERRY_DEBUG_DIR");
  if (dir == nullptr || *dir == '\0') return;
  const std::string path = std::string(dir) + "/ferry-dump." + FileSafe(agent.job()) +
                           "." + FileSafe(agent.name()) + "." + std::to_string(getpid()) +
                           ".json";
  const std::string aside = path + ".tmp";
  const int fd = open(aside.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    FERRY_LOG(FERRY_LOG_WARN, kLog,
              "FERRY_DEBUG_DIR: cannot write " + aside + ": " + std::strerror(errno));
    return;
  }
  WriteAll(fd, text);
  close(fd);
  if (rename(aside.c_str(), path.c_str()) != 0) {
    FERRY_LOG(FERRY_LOG_WARN, kLog,
              "FERRY_DEBUG_DIR: cannot rename " + aside + ": " + std::strerror(errno));
  }
}

void DumpThread(int read_fd, int signo) {
  char buf[64];
  while (true) {
    const ssize_t n = read(read_fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    std::vector<std::shared_ptr<Agent>> live;
    {
      std::lock_guard<std::mutex> l(registry().mu);
      auto& agents = registry().agents;
      for (auto it = agents.begin(); it != agents.end();) {
        if (auto a = it->lock()) {
          live.push_back(std::move(a));
          ++it;
        } else {
          it = agents.erase(it);
        }
      }
    }
    for (const auto& a : live) DumpOne(*a, signo);
  }
}

// Under registry().mu, once per process.
void Install() {
  const int signo = ChosenSignal();
  if (signo == 0) return;
  struct sigaction old {};
  if (sigaction(signo, nullptr, &old) != 0) return;
  if ((old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) {
    FERRY_LOG(FERRY_LOG_INFO, kLog,
              "signal " + std::to_string(signo) +
                  " has a handler of the application's: ferry's debug dump does not "
                  "take it (choose another with FERRY_DEBUG_SIGNAL)");
    return;
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return;
  fcntl(fds[1], F_SETFL, O_NONBLOCK);
  g_poke_fd = fds[1];
  std::thread(DumpThread, fds[0], signo).detach();
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(signo, &sa, nullptr) != 0) {
    FERRY_LOG(FERRY_LOG_WARN, kLog,
              "cannot install the debug-dump signal " + std::to_string(signo) + ": " +
                  std::strerror(errno));
  }
}

}  // namespace

void Watch(const std::shared_ptr<Agent>& agent) {
  std::lock_guard<std::mutex> l(registry().mu);
  if (!registry().installed) {
    registry().installed = true;
    Install();
  }
  registry().agents.push_back(agent);
}

}  // namespace ferry::debug_signal
