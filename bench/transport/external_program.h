// A program the benchmark runs as a reference (libfabric's fi_pingpong),
// with its stdout and stderr captured. It is started with fork + exec rather
// than posix_spawn so that the child can ask to be killed when the benchmark
// dies (PR_SET_PDEATHSIG): a reference left behind would spin or wait on a
// port forever on a machine other people share. Starting it is not timed.
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

}  // namespace ferry::bench
