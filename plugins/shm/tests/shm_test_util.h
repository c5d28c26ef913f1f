// What the shm tests, their helper peer and the ping-pong driver share: the
// plugin loaded from the build tree through the production loader, an
// Endpoint (one context plus the events it returned), and helpers to spawn
// a peer process (posix_spawn of a helper executable: a real exec, not a
// fork) and talk to it by lines on a pipe.
#pragma once

#include "loader/host_services.h"
#include "loader/plugin_loader.h"
#include "transport/transport.h"

#include <ferry/transport.h>

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace ferry_shm_test {

using ferry::Status;
using Clock = std::chrono::steady_clock;

// libferry-shm.so from FERRY_SHM_PLUGIN_DIR (a compile definition).
std::shared_ptr<const ferry::Plugin> LoadShm();

// An owned copy of an event (ARRIVAL's header and inline bytes are copied
// too, so they outlive the answer).
struct Ev {
  int32_t type = 0;
  ferry_status_t status = FERRY_OK;
  ferry_conn_t* conn = nullptr;
  void* user_data = nullptr;
  void* conn_user_data = nullptr;
  std::string message;
  uint64_t msg_id = 0;
  std::vector<unsigned char> header;
  std::vector<ferry_arrival_segment_t> segs;  // inline_data still borrowed
};

class Endpoint {
 public:
  // init() with `flags`; nullptr (with a gtest-free message in *why) on failure.
  static std::unique_ptr<Endpoint> Open(uint32_t flags = 0, std::string* why = nullptr);
  ~Endpoint();

  ferry::Transport* t() { return t_.get(); }
  int wakeup_fd() const { return t_->info().wakeup_fd; }

  // One progress() call; events are appended to events(). Returns how many.
  size_t Poll();
  std::deque<Ev>& events() { return events_; }
  // Removes and returns the first event of `type` (on `conn` if given).
  bool Take(int32_t type, Ev* out, ferry_conn_t* conn = nullptr);

  std::string Listen(ferry_listener_t** out, const std::string& address = "");
  ferry_conn_t* Connect(const std::string& address, void* user_data = nullptr);
  // Posts one message; segments are {pointer, length} pairs.
  Status Send(ferry_conn_t* conn, const std::string& header,
              const std::vector<std::pair<const void*, uint64_t>>& segments,
              void* user_data = nullptr);
  // Places every segment of `arrival`: inline ones copied into dests[i],
  // the others placed there. dests[i] must hold the segment.
  Status PlaceAll(const Ev& arrival, const std::vector<void*>& dests, void* user_data);

 private:
  std::unique_ptr<ferry::Transport> t_;
  std::deque<Ev> events_;
  std::vector<ferry_event_t> buf_ = std::vector<ferry_event_t>(64);
};

// Progresses every endpoint until done() holds; false after timeout_ms.
bool PumpUntil(std::initializer_list<Endpoint*> eps, const std::function<bool()>& done,
               int timeout_ms = 10000);

// Fills / checks a deterministic byte pattern (offset of first mismatch or -1).
void FillPattern(void* data, size_t len, uint64_t seed);
int64_t PatternMismatch(const void* data, size_t len, uint64_t seed);

// A helper process: `exe` with `args`, its stdout a pipe we read by lines.
class Child {
 public:
  static std::unique_ptr<Child> Spawn(const std::string& exe, const std::vector<std::string>& args,
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
