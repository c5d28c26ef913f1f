// A peer in another process: this very binary re-executed (posix_spawn of
// /proc/self/exe) in the hidden `--peer MODE` mode, given the plugin's file
// and the address to connect to. A real exec, not a bare fork: the child
// starts with a fresh loader, fresh plugin globals and no copy of the
// parent's threads, exactly like a second worker process.
//
// Parent and peer talk over a socketpair passed as an inherited fd: the peer
// writes one word per line ("ready", "sent", "error <text>"), the parent
// writes cue words. The peer exits when the channel closes, so a dead or
// aborted parent never leaves peers behind. Nothing here sleeps: waits are
// poll() on the channel with a deadline, and waitpid() to reap.
#pragma once

#include "harness/util.h"

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

namespace ferry::conformance {

class PeerProcess {
 public:
  // Starts `exe --peer <mode> --peer-plugin <plugin_path> --peer-address
  // <address> --peer-fd <n>`. nullptr with *error set on failure.
  static std::unique_ptr<PeerProcess> Spawn(const std::string& exe,
                                            const std::string& mode,
                                            const std::string& plugin_path,
                                            const std::string& address,
                                            std::string* error);
  ~PeerProcess();  // SIGKILL and reap if still running
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Our end of the control channel (an fd of this process, -1 once closed).
  int channel_fd() const { return fd_; }

  // Non-blocking: true and the line (without '\n') when the peer has written
  // a complete one since the last call.
  bool TryReadLine(std::string* line);
  // True once the peer closed the channel (it exited or crashed).
  bool ChannelClosed() const { return eof_; }
  // Writes "word\n" to the peer.
  bool Tell(const std::string& word);
  // Closes our end: the peer's signal to finish cleanly.
  void CloseChannel();
  // SIGKILL, then reap. Idempotent.
  void Kill();
  // After CloseChannel(): waits (poll on the channel, bounded) for the peer
  // to exit and reaps it. False on timeout (the peer is then killed).
  bool WaitExit(milliseconds timeout, int* wait_status);
  // "exited with 0", "killed by signal 9".
  static std::string DescribeWaitStatus(int wait_status);

 private:
  PeerProcess() = default;
  void Drain();

  pid_t pid_ = -1;
  int fd_ = -1;
  bool eof_ = false;
  bool reaped_ = false;
  std::string buffer_;
};

// The hidden peer mode: returns the process exit code. Used by main() when
// argv[1] is "--peer".
int RunPeer(int argc, char** argv);

// The `--peer device-*` modes (harness/device_peer.cc, built only with the
// CUDA toolkit's headers): the receiving process of the DEV-* requirements.
int RunDevicePeer(const std::string& mode, const std::string& plugin,
                  const std::string& address, int fd);

}  // namespace ferry::conformance
