#include "transport/peer_process.h"

#include "transport/external_program.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

extern char** environ;

namespace ferry::bench {
namespace {

Status Errno(const std::string& what) {
  return Status(FERRY_UNKNOWN, what + ": " + std::strerror(errno));
}

}  // namespace

Status PinToCpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) {
    return Errno("cannot pin to CPU " + std::to_string(cpu) + " (sched_setaffinity)");
  }
  return Status();
}

bool CpuAllowed(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (cpu < 0 || cpu >= CPU_SETSIZE || sched_getaffinity(0, sizeof set, &set) != 0) {
    return false;
  }
  return CPU_ISSET(cpu, &set);
}

ControlChannel::~ControlChannel() {
  close(fd_);
}

Status ControlChannel::Send(const std::string& line) {
  std::string data = line + "\n";
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Status(FERRY_PEER_GONE,
                    std::string("control channel: ") + std::strerror(errno));
    }
    off += static_cast<size_t>(n);
  }
  return Status();
}

StatusOr<std::string> ControlChannel::Receive(int timeout_ms) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const size_t nl = pending_.find('\n');
    if (nl != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return Status(FERRY_DEADLINE_EXCEEDED, "control channel: no message within " +
                                                 std::to_string(timeout_ms) + " ms");
    }
    pollfd p{fd_, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno != EINTR) return Errno("control channel: poll");
    if (ready <= 0) continue;
    char buf[512];
    const ssize_t n = recv(fd_, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Status(FERRY_PEER_GONE,
                    "control channel: the other process "
                    "closed it (exited or crashed)");
    }
    pending_.append(buf, static_cast<size_t>(n));
  }
}

StatusOr<std::unique_ptr<PeerProcess>> PeerProcess::Spawn(
    const std::vector<std::string>& args) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return Errno("socketpair");
  }
  // Only the child's end survives the exec.
  if (fcntl(sv[1], F_SETFD, 0) != 0) {
    Status st = Errno("fcntl");
    close(sv[0]);
    close(sv[1]);
    return st;
  }
  // The very binary that is running, however it was invoked (from PATH, by
  // the `ferry` CLI, by ctest).
  const std::string exe = SelfExecutable();
  std::vector<std::string> all = {exe};
  all.insert(all.end(), args.begin(), args.end());
  all.push_back("--control-fd");
  all.push_back(std::to_string(sv[1]));
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), environ);
  close(sv[1]);
  if (rc != 0) {
    close(sv[0]);
    return Status(FERRY_UNKNOWN,
                  "cannot start the peer process "
                  "(posix_spawn " +
                      exe + "): " + std::strerror(rc));
  }
  return std::unique_ptr<PeerProcess>(new PeerProcess(pid, sv[0]));
}

PeerProcess::~PeerProcess() {
  if (!reaped_) {
    kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

Status PeerProcess::Wait(int timeout_ms) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) break;
    if (r < 0 && errno != EINTR) return Errno("waitpid");
    if (std::chrono::steady_clock::now() > deadline) {
      return Status(FERRY_DEADLINE_EXCEEDED, "the peer process did not exit within " +
                                                 std::to_string(timeout_ms) +
                                                 " ms; killing it");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  reaped_ = true;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status();
  if (WIFEXITED(status)) {
    return Status(FERRY_UNKNOWN, "the peer process exited with status " +
                                     std::to_string(WEXITSTATUS(status)) +
                                     " (its message is above)");
  }
  return Status(FERRY_UNKNOWN, std::string("the peer process was killed by signal ") +
                                   strsignal(WTERMSIG(status)));
}

}  // namespace ferry::bench
