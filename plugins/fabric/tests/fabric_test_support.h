// Helpers for the fabric plugin tests: the fabric plugin bound to the
// testkit's endpoints (conformance/testkit: production loader, owned event
// copies, pumping until a condition holds, linking two contexts), its
// parameters set for one test, and messages sent and placed with host
// registrations or device memory.
#pragma once

#include "testkit/endpoint.h"
#include "testkit/event.h"
#include "testkit/params.h"
#include "testkit/pattern.h"

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

using ferry::testkit::Event;
using ferry::testkit::FillPattern;
using ferry::testkit::Link;
using Clock = std::chrono::steady_clock;

// libferry-fabric.so from the build tree, loaded once per process.
std::shared_ptr<const ferry::Plugin> FabricPlugin();

// Sets plugin parameters ("fabric", key) for the lifetime of the object.
class Params : public ferry::testkit::ScopedParams {
 public:
  Params(std::initializer_list<std::pair<std::string, std::string>> kv)
      : ScopedParams("fabric", kv) {}
};

// A context of the fabric plugin; check ok() (status() says why not).
class Ctx : public ferry::testkit::Endpoint {
 public:
  explicit Ctx(uint32_t flags = 0);
};

// The fabric tests' deadline: libfabric's providers set up and tear down
// more slowly than the kernel's sockets.
constexpr std::chrono::milliseconds kDeadline = std::chrono::seconds(60);

inline bool PumpUntil(std::initializer_list<ferry::testkit::Endpoint*> ctxs,
                      const std::function<bool()>& done,
                      std::chrono::milliseconds timeout = kDeadline) {
  return ferry::testkit::PumpUntil(ctxs, done, timeout);
}

// Listens on `server`, connects from `client`, waits for both sides.
bool Connect(Ctx* server, Ctx* client, Link* link);
// Closes both ends and waits for CLOSED on each.
void CloseLink(Ctx* server, Ctx* client, const Link& link);

// Sends one message (header + segments, all in `device` memory); retries
// on back-pressure.
ferry::Status SendMessage(Ctx* ctx, ferry_conn_t* conn, const std::string& header,
                          const std::vector<std::pair<const void*, uint64_t>>& segs,
                          void* user_data, const std::vector<ferry_mr_t*>& mrs = {},
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

}  // namespace ferry_fabric_test
