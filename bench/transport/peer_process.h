// The peer: a second process running this same binary with the hidden
// `--peer` flag. It is exec'ed (posix_spawn of /proc/self/exe's target), not forked
// and left to run on: a forked copy would share the parent's address-space
// history (already faulted pages, a loaded plugin, allocator state) and would
// not be two independent processes the way a client and a server are. Each
// process pins itself to its own CPU, so the two busy-polling loops never
// share a core. A socketpair carries a few control lines between them
// (listener addresses, "finished", "done"); all measured traffic goes over
// TCP.
#pragma once

#include "common/status.h"

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

namespace ferry::bench {

// Pins the calling process to `cpu` with sched_setaffinity.
Status PinToCpu(int cpu);
// True when `cpu` is in this process's allowed set (cgroups and taskset can
// hide CPUs).
bool CpuAllowed(int cpu);

// Line-oriented messages over a stream socket.
class ControlChannel {
 public:
  explicit ControlChannel(int fd) : fd_(fd) {}
  ~ControlChannel();
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  Status Send(const std::string& line);  // appends '\n'
  // The next line (without '\n'); PEER_GONE when the other side closed,
  // DEADLINE_EXCEEDED after timeout_ms.
  StatusOr<std::string> Receive(int timeout_ms);

 private:
  int fd_;
  std::string pending_;
};

class PeerProcess {
 public:
  // Execs this binary with `args` followed by "--control-fd N" where N is
  // the child's end of a new control socketpair.
  static StatusOr<std::unique_ptr<PeerProcess>> Spawn(
      const std::vector<std::string>& args);
  ~PeerProcess();  // a peer still running is killed and reaped
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  ControlChannel& control() { return *control_; }
  pid_t pid() const { return pid_; }
  // Waits up to timeout_ms for the peer to exit; OK only for exit status 0.
  Status Wait(int timeout_ms);

 private:
  PeerProcess(pid_t pid, int control_fd)
      : pid_(pid), control_(new ControlChannel(control_fd)) {}
  pid_t pid_;
  bool reaped_ = false;
  std::unique_ptr<ControlChannel> control_;
};

}  // namespace ferry::bench
