#include "harness/peer_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace ferry::conformance {

std::unique_ptr<PeerProcess> PeerProcess::Spawn(const std::string& exe,
                                                const std::string& mode,
                                                const std::string& plugin_path,
                                                const std::string& address,
                                                std::string* error) {
  int sv[2];
  // Our end is close-on-exec; the peer's end is not, so it is inherited at
  // its own number (no dup2 dance that could clear the wrong flag).
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
    *error = std::string("socketpair: ") + std::strerror(errno);
    return nullptr;
  }
  fcntl(sv[0], F_SETFD, FD_CLOEXEC);
  fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);

  std::vector<std::string> args = {exe,
                                   "--peer",
                                   mode,
                                   "--peer-plugin",
                                   plugin_path,
                                   "--peer-address",
                                   address,
                                   "--peer-fd",
                                   std::to_string(sv[1])};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  pid_t pid = -1;
  int rc = posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), environ);
  close(sv[1]);
  if (rc != 0) {
    close(sv[0]);
    *error = "posix_spawn " + exe + ": " + std::strerror(rc);
    return nullptr;
  }
  std::unique_ptr<PeerProcess> peer(new PeerProcess());
  peer->pid_ = pid;
  peer->fd_ = sv[0];
  return peer;
}

PeerProcess::~PeerProcess() {
  Kill();
  if (fd_ >= 0) close(fd_);
}

void PeerProcess::Drain() {
  char buf[512];
  while (fd_ >= 0 && !eof_) {
    ssize_t n = read(fd_, buf, sizeof buf);
    if (n > 0) {
      buffer_.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      eof_ = true;
    } else {
      if (errno != EINTR) break;  // EAGAIN: nothing more for now
    }
  }
}

bool PeerProcess::TryReadLine(std::string* line) {
  Drain();
  size_t nl = buffer_.find('\n');
  if (nl == std::string::npos) return false;
  *line = buffer_.substr(0, nl);
  buffer_.erase(0, nl + 1);
  return true;
}

bool PeerProcess::Tell(const std::string& word) {
  std::string line = word + "\n";
  return fd_ >= 0 && send(fd_, line.data(), line.size(), MSG_NOSIGNAL) ==
                         static_cast<ssize_t>(line.size());
}

void PeerProcess::CloseChannel() {
  if (fd_ >= 0) shutdown(fd_, SHUT_WR);
}

void PeerProcess::Kill() {
  if (pid_ <= 0 || reaped_) return;
  kill(pid_, SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
}

bool PeerProcess::WaitExit(milliseconds timeout, int* wait_status) {
  const auto deadline = Clock::now() + timeout;
  // The channel reaches EOF when the peer's process is gone (its end closes
  // with it); then waitpid() returns at once.
  while (!eof_) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      Kill();
      return false;
    }
    pollfd p{fd_, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(left.count()));
    Drain();
  }
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
  if (wait_status != nullptr) *wait_status = status;
  return true;
}

std::string PeerProcess::DescribeWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) {
    return "exited with " + std::to_string(WEXITSTATUS(wait_status));
  }
  if (WIFSIGNALED(wait_status)) {
    return "killed by signal " + std::to_string(WTERMSIG(wait_status)) + " (" +
           strsignal(WTERMSIG(wait_status)) + ")";
  }
  return "wait status " + std::to_string(wait_status);
}

}  // namespace ferry::conformance
