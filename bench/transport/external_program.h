// A program the benchmark runs as a reference (libfabric's fi_pingpong),
// with its stdout and stderr captured. Starting it is not timed, but how it
// is started shows in the rounds after it:
//
// - Not fork(): it write-protects every private page for copy-on-write,
//   and each page's next write faults even after the child is gone. On
//   tcp;ofi_rxm that is one fault per received message for the next few
//   thousand (rxm walks its bounce buffers one page per message), which
//   would slow ferry's rounds after each batch but not the RMA floor's
//   (docs/benchmarks/README.md, "Host effects").
// - So posix_spawn (no page tables copied) of this very binary with
//   --exec-reference, which asks to be killed when the benchmark dies
//   (PR_SET_PDEATHSIG: a reference left behind would spin or wait on a port
//   forever on a machine other people share) and then execs the program.
#pragma once

#include "common/status.h"

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

namespace ferry::bench {

class ExternalProgram {
 public:
  // argv[0] must be an absolute path (FindProgram). stdin is /dev/null.
  static StatusOr<std::unique_ptr<ExternalProgram>> Start(
      const std::vector<std::string>& argv);
  ~ExternalProgram();  // a program still running is killed and reaped
  ExternalProgram(const ExternalProgram&) = delete;
  ExternalProgram& operator=(const ExternalProgram&) = delete;

  // Reads output until a line of stderr contains `marker`: true. False when
  // the program closed its output (exited) first; DEADLINE_EXCEEDED after
  // timeout_ms.
  StatusOr<bool> WaitForStderrLine(const std::string& marker, int timeout_ms);
  // Reads the rest of the output and waits for the exit. OK only for exit
  // status 0; otherwise the status says how it ended, with its stderr.
  Status Finish(int timeout_ms);

  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }

 private:
  ExternalProgram(pid_t pid, int out_fd, int err_fd, std::string name)
      : pid_(pid), out_fd_(out_fd), err_fd_(err_fd), name_(std::move(name)) {}
  // One poll() over the open pipes, appending what is there. False when
  // both pipes are closed.
  StatusOr<bool> ReadSome(int timeout_ms);

  pid_t pid_;
  int out_fd_, err_fd_;
  std::string name_;
  std::string out_, err_;
  bool reaped_ = false;
};

// The absolute path of `name` on $PATH, or "" when it is not installed.
std::string FindProgram(const std::string& name);

// The running binary's resolved path (for exec'ing itself).
std::string SelfExecutable();

// The --exec-reference trampoline, run first thing in main():
// `SELF --exec-reference PARENT_PID PROGRAM ARGS...` sets the parent-death
// signal, gives up (126) if PARENT_PID is already gone, and execs PROGRAM.
// Returns only on failure, with the exit status to use.
constexpr char kExecReferenceFlag[] = "--exec-reference";
int ExecReference(int argc, char** argv);

}  // namespace ferry::bench
