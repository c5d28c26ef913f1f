// Helpers for the fabric plugin tests: load the plugin through the
// production loader, set its parameters for one test, drive contexts with
// progress() until a condition holds (never a sleep), and keep owned copies
// of events.
#pragma once

#include "loader/plugin_loader.h"
#include "transport/transport.h"

#include <ferry/transport.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ferry_fabric_test {

// libferry-fabric.so from the build tree, loaded once per process.
std::shared_ptr<const ferry::Plugin> FabricPlugin();

// Sets plugin parameters ("fabric", key) for the lifetime of the object.
class Params {
 public:
  Params(std::initializer_list<std::pair<std::string, std::string>> kv);
  ~Params();

 private:
  std::vector<std::string> keys_;
};

struct Event {
  int32_t type = 0;
  ferry_status_t status = FERRY_OK;
  ferry_conn_t* conn = nullptr;
  void* user_data = nullptr;
  std::string message;
  uint64_t msg_id = 0;
  std::string header;
  struct Segment {
    uint64_t length = 0;
    bool is_inline = false;
    std::string bytes;
  };
  std::vector<Segment> segments;
};

// One context plus the events it returned that the test has not taken yet.
class Ctx {
 public:
  // Opens a context; check ok() (the status says why not).
  explicit Ctx(uint32_t flags = 0);
  bool ok() const { return transport_ != nullptr; }
  const ferry::Status& status() const { return status_; }
  ferry::Transport& t() { return *transport_; }

  size_t PollOnce();
  bool Has(int32_t type, ferry_conn_t* conn = nullptr) const;
  Event Take(int32_t type, ferry_conn_t* conn = nullptr);
  std::string Listen();

 private:
  std::unique_ptr<ferry::Transport> transport_;
  ferry::Status status_;
  std::vector<Event> events_;
};

using Clock = std::chrono::steady_clock;

bool PumpUntil(std::initializer_list<Ctx*> ctxs, const std::function<bool()>& done,
               std::chrono::milliseconds timeout = std::chrono::seconds(60));

// A connected pair: client (connect) and server (accepted) handles.
struct Link {
  ferry_conn_t* client = nullptr;
  ferry_conn_t* server = nullptr;
  ferry_listener_t* listener = nullptr;
};
// Listens on `server`, connects from `client`, waits for both sides.
bool Connect(Ctx* server, Ctx* client, Link* link);
// Closes both ends and waits for CLOSED on each.
void CloseLink(Ctx* server, Ctx* client, const Link& link);

// Sends one message (header + segments, all in `device` memory); retries
// on back-pressure.
ferry::Status SendMessage(Ctx* ctx, ferry_conn_t* conn, const std::string& header,
                          const std::vector<std::pair<const void*, uint64_t>>& segs,
                          void* user_data,
                          const std::vector<ferry_mr_t*>& mrs = {},
                          ferry_device_t device = {FERRY_DEVICE_CPU, 0});

// Waits for the next ARRIVAL on `conn` of `rx` (driving `tx` too), answers
// it with place() into `dests` (in `device` memory; segments past the list
// are dropped), and waits for its PLACE_DONE: its status, FERRY_UNKNOWN
// (and a test failure) if either never came. *arrival_out gets the ARRIVAL.
ferry_status_t PlaceNext(Ctx* rx, Ctx* tx, ferry_conn_t* conn,
                         const std::vector<std::pair<void*, uint64_t>>& dests,
                         Event* arrival_out = nullptr,
                         const std::vector<ferry_mr_t*>& mrs = {},
                         ferry_device_t device = {FERRY_DEVICE_CPU, 0});
// The same for an ARRIVAL the test has taken already.
ferry_status_t PlaceArrival(Ctx* rx, Ctx* tx, ferry_conn_t* conn, const Event& arrival,
                            const std::vector<std::pair<void*, uint64_t>>& dests,
                            const std::vector<ferry_mr_t*>& mrs = {},
                            ferry_device_t device = {FERRY_DEVICE_CPU, 0});

// Fills `n` bytes with a pattern derived from `seed`.
void Fill(void* data, size_t n, uint64_t seed);

}  // namespace ferry_fabric_test
