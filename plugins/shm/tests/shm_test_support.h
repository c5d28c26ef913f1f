// What the shm tests, their helper peer and the ping-pong driver share: the
// shm plugin bound to the testkit's endpoints (conformance/testkit:
// production loader, owned event copies, pumping until a condition holds),
// the shm tests' own ways of posting and answering messages, and helpers to
// spawn a peer process (posix_spawn of a helper executable: a real exec, not
// a fork) and talk to it by lines on a pipe.
#pragma once

#include "loader/host_services.h"
#include "testkit/endpoint.h"
#include "testkit/event.h"
#include "testkit/pattern.h"

#include <ferry/transport.h>

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace ferry_shm_test {

using ferry::Status;
using ferry::testkit::Event;
using ferry::testkit::FillPattern;
using ferry::testkit::PatternMismatch;
using Clock = std::chrono::steady_clock;

// libferry-shm.so from FERRY_SHM_PLUGIN_DIR (a compile definition).
std::shared_ptr<const ferry::Plugin> LoadShm();

// A context of the shm plugin. Its polls check nothing (shm's tests look at
// the events themselves), and its helpers report failures by value rather
// than EXPECT, since several tests expect a call to fail.
class Endpoint : public ferry::testkit::Endpoint {
 public:
  // init() with `flags`; nullptr (with a gtest-free message in *why) on failure.
  static std::unique_ptr<Endpoint> Open(uint32_t flags = 0, std::string* why = nullptr);

  std::string Listen(ferry_listener_t** out, const std::string& address = "");
  ferry_conn_t* Connect(const std::string& address, void* user_data = nullptr);
  // Posts one message; segments are {pointer, length} pairs.
  Status Send(ferry_conn_t* conn, const std::string& header,
              const std::vector<std::pair<const void*, uint64_t>>& segments,
              void* user_data = nullptr);
  // Places every segment of `arrival`: inline ones copied into dests[i],
  // the others placed there. dests[i] must hold the segment.
  Status PlaceAll(const Event& arrival, const std::vector<void*>& dests, void* user_data);

 private:
  explicit Endpoint(uint32_t flags);
};

// Progresses every endpoint until done() holds; false after timeout_ms.
bool PumpUntil(std::initializer_list<ferry::testkit::Endpoint*> eps,
               const std::function<bool()>& done, int timeout_ms = 10000);

// A helper process: `exe` with `args`, its stdout a pipe we read by lines.
class Child {
 public:
  static std::unique_ptr<Child> Spawn(const std::string& exe,
                                      const std::vector<std::string>& args,
                                      const std::vector<std::string>& extra_env = {});
  ~Child();  // SIGKILLs and reaps a child still running
  pid_t pid() const { return pid_; }
  // The next line, or "" after timeout_ms / EOF.
  std::string ReadLine(int timeout_ms = 10000);
  void Kill();
  // Exit status (waits up to timeout_ms); -1 if it did not exit.
  int Wait(int timeout_ms = 10000);

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string buffered_;
  bool reaped_ = false;
};

// Entries of a directory (names), or empty when it does not exist.
std::vector<std::string> ListDir(const std::string& dir);
// This process's mappings of shm segments (/proc/self/maps "memfd:ferry-shm").
std::vector<void*> ShmMappings();
// Number of open fds (/proc/self/fd).
int CountFds();

}  // namespace ferry_shm_test
