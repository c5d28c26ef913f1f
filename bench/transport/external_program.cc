#include "transport/external_program.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ferry::bench {
namespace {

using Clock = std::chrono::steady_clock;

int MillisLeft(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

}  // namespace

std::string FindProgram(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    return access(name.c_str(), X_OK) == 0 ? name : "";
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string dir = dirs.substr(start, end - start);
    if (!dir.empty()) {
      const std::string candidate = dir + "/" + name;
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    start = end + 1;
  }
  return "";
}

std::string SelfExecutable() {
  // Resolved, not the literal "/proc/self/exe": exec'ing that would start
  // valgrind's tool instead of the benchmark when profiling with
  // --trace-children, and argv[0] must be absolute for the plugin loader's
  // relative search directory.
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  return len > 0 ? std::string(self, static_cast<size_t>(len))
                 : std::string("/proc/self/exe");
}

int ExecReference(int argc, char** argv) {
  if (argc < 4) return 126;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The benchmark may have died before the line above: then nobody would
  // kill this reference.
  if (getppid() != static_cast<pid_t>(std::atol(argv[2]))) return 126;
  execv(argv[3], argv + 3);
  std::fprintf(stderr, "cannot exec %s: %s\n", argv[3], std::strerror(errno));
  return 127;
}

StatusOr<std::unique_ptr<ExternalProgram>> ExternalProgram::Start(
    const std::vector<std::string>& argv) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    return Status(FERRY_UNKNOWN, std::string("pipe: ") + std::strerror(errno));
  }
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return Status(FERRY_UNKNOWN, std::string("pipe: ") + std::strerror(errno));
  }
  std::vector<std::string> all = {SelfExecutable(), kExecReferenceFlag,
                                  std::to_string(getpid())};
  all.insert(all.end(), argv.begin(), argv.end());
  std::vector<char*> args;
  for (std::string& a : all) args.push_back(a.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    for (int fd : {out[0], out[1], err[0], err[1]}) close(fd);
    return Status(FERRY_UNKNOWN, "cannot start " + argv[0] + " (posix_spawn " + all[0] +
                                     "): " + std::strerror(rc));
  }
  close(out[1]);
  close(err[1]);
  return std::unique_ptr<ExternalProgram>(
      new ExternalProgram(pid, out[0], err[0], argv[0]));
}

ExternalProgram::~ExternalProgram() {
  if (out_fd_ >= 0) close(out_fd_);
  if (err_fd_ >= 0) close(err_fd_);
  if (!reaped_) {
    kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

StatusOr<bool> ExternalProgram::ReadSome(int timeout_ms) {
  pollfd fds[2];
  int n = 0;
  if (out_fd_ >= 0) fds[n++] = {out_fd_, POLLIN, 0};
  if (err_fd_ >= 0) fds[n++] = {err_fd_, POLLIN, 0};
  if (n == 0) return false;
  const int ready = poll(fds, static_cast<nfds_t>(n), timeout_ms);
  if (ready < 0 && errno != EINTR) {
    return Status(FERRY_UNKNOWN, std::string("poll: ") + std::strerror(errno));
  }
  for (int i = 0; ready > 0 && i < n; ++i) {
    if (fds[i].revents == 0) continue;
    char buf[4096];
    const ssize_t got = read(fds[i].fd, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    const bool is_out = fds[i].fd == out_fd_;
    if (got <= 0) {
      close(fds[i].fd);
      (is_out ? out_fd_ : err_fd_) = -1;
      continue;
    }
    (is_out ? out_ : err_).append(buf, static_cast<size_t>(got));
  }
  return true;
}

StatusOr<bool> ExternalProgram::WaitForStderrLine(const std::string& marker,
                                                  int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    // Only whole lines count: the marker may arrive in two reads.
    const size_t last_newline = err_.rfind('\n');
    if (last_newline != std::string::npos &&
        err_.substr(0, last_newline).find(marker) != std::string::npos) {
      return true;
    }
    if (out_fd_ < 0 && err_fd_ < 0) return false;
    const int left = MillisLeft(deadline);
    if (left == 0) {
      return Status(FERRY_DEADLINE_EXCEEDED, name_ + " did not print '" + marker +
                                                 "' within " +
                                                 std::to_string(timeout_ms) + " ms");
    }
    auto more = ReadSome(left);
    if (!more.ok()) return more.status();
  }
}

Status ExternalProgram::Finish(int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (out_fd_ >= 0 || err_fd_ >= 0) {
    const int left = MillisLeft(deadline);
    if (left == 0) {
      return Status(FERRY_DEADLINE_EXCEEDED, name_ + " did not finish within " +
                                                 std::to_string(timeout_ms) + " ms");
    }
    auto more = ReadSome(left);
    if (!more.ok()) return more.status();
  }
  // Both pipes closed: the program has exited (or closed them and is about
  // to); waitpid blocks at most that long.
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0) {
    if (errno != EINTR) {
      return Status(FERRY_UNKNOWN, "waitpid(" + name_ + "): " + std::strerror(errno));
    }
  }
  reaped_ = true;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status();
  const std::string how =
      WIFEXITED(status)
          ? "exited with status " + std::to_string(WEXITSTATUS(status))
          : std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  std::string tail = err_.size() > 2000 ? err_.substr(err_.size() - 2000) : err_;
  return Status(FERRY_UNKNOWN, name_ + " " + how + "; its stderr:\n" + tail +
                                   (out_.empty() ? "" : "its stdout:\n" + out_));
}

}  // namespace ferry::bench
