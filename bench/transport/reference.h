// The references a plugin is measured against, side by side in the same run:
// implementations of the same ping-pong without ferry (a raw floor written
// for the benchmark, another library's transport). Which references apply
// depends on the plugin (references.cc): tcp is measured against a raw TCP
// socket, shm against a raw shared-memory ring and TensorPipe's shm
// transport. Each reference is set up the same way the ferry side is: the
// peer listens and publishes an address over the control channel, the client
// connects to it, and then both sides run the plan through PingPongClient
// and PingPongServer (pingpong.h). The fabric plugin is measured against a
// raw libfabric floor and libfabric's own fi_pingpong (fabric_references.h).
#pragma once

#include "common/status.h"
#include "transport/buffers.h"
#include "transport/options.h"
#include "transport/peer_process.h"
#include "transport/pingpong.h"

#include <memory>
#include <string>
#include <vector>

namespace ferry::bench {

struct ReferenceInfo {
  // JSON key of its figures and the value --only takes: "raw" is always the
  // plugin's raw floor, so scripts reading tcp and shm results alike find it
  // under the same name.
  std::string key;
  std::string label;   // for tables and plots: "raw TCP", "TensorPipe shm"
  std::string method;  // what it does per round trip, for the JSON
  // Measured in a pass of its own rather than alternating with ferry and the
  // other references: set when the implementation keeps threads spinning for
  // as long as it is connected (TensorPipe's shm reactor), which would change
  // what the others measure (no CPU would ever idle in sleep mode).
  bool isolated = false;
  // Times itself (an external program: libfabric's fi_pingpong): measured
  // in batches (BatchPingPongClient), compared with ferry's loop mean,
  // and only in busy mode (it spins). Listen/Connect are not used for it;
  // ListenBatch/ConnectBatch are.
  bool batch = false;
};

// The peer's side of one reference between Listen and Accept.
class ReferenceListener {
 public:
  virtual ~ReferenceListener() = default;
  // Where the client connects; contains no whitespace (it travels in a
  // space-separated control line).
  virtual std::string address() const = 0;
  // Waits at most timeout_ms for the client that connected to address().
  virtual StatusOr<std::unique_ptr<PingPongServer>> Accept(int timeout_ms) = 0;
};

// For a floor that is its own listener (a shared mapping, a libfabric
// endpoint: one object per connection, published before the client comes):
// Accept waits through `Wait` for the client, then hands the object over.
template <typename PingPong, Status (PingPong::*Wait)(int timeout_ms)>
class SelfAcceptingListener final : public ReferenceListener {
 public:
  explicit SelfAcceptingListener(std::unique_ptr<PingPong> pingpong)
      : pingpong_(std::move(pingpong)) {}
  std::string address() const override { return pingpong_->address(); }
  StatusOr<std::unique_ptr<PingPongServer>> Accept(int timeout_ms) override {
    Status st = ((*pingpong_).*Wait)(timeout_ms);
    if (!st.ok()) return st;
    return std::unique_ptr<PingPongServer>(std::move(pingpong_));
  }

 private:
  std::unique_ptr<PingPong> pingpong_;
};

// One reference implementation; each suite (polling mode) sets up a fresh
// connection. `buffers` is borrowed for the life of what is returned.
class Reference {
 public:
  virtual ~Reference() = default;
  virtual const ReferenceInfo& info() const = 0;
  virtual StatusOr<std::unique_ptr<ReferenceListener>> Listen(PollMode mode,
                                                              BufferSet* buffers) = 0;
  // Must not wait for the peer to accept: the peer accepts every reference
  // and ferry in turn only after the client has connected them all.
  virtual StatusOr<std::unique_ptr<PingPongClient>> Connect(const std::string& address,
                                                            PollMode mode,
                                                            BufferSet* buffers) = 0;
  // Batch references: each run is set up over the control channel
  // (borrowed for the life of what is returned).
  virtual StatusOr<std::unique_ptr<BatchPingPongServer>> ListenBatch(
      ControlChannel* control) {
    (void)control;
    return Status(FERRY_UNIMPLEMENTED, info().key + " is not a batch reference");
  }
  virtual StatusOr<std::unique_ptr<BatchPingPongClient>> ConnectBatch(
      ControlChannel* control) {
    (void)control;
    return Status(FERRY_UNIMPLEMENTED, info().key + " is not a batch reference");
  }
};

struct SkippedReference {
  ReferenceInfo info;
  std::string reason;  // why it is not measured in this build
};

struct ReferenceSet {
  std::vector<std::unique_ptr<Reference>> measured;
  std::vector<SkippedReference> skipped;
};

// The references for a plugin, by the name it reports at negotiation; the
// raw floor first. Plugins without references of their own get the raw TCP
// floor (the tcp plugin's) as their baseline. The fabric plugin's run on
// options.fabric_provider (ResolveFabricProvider).
ReferenceSet ReferencesFor(const std::string& plugin_name, const Options& options);

}  // namespace ferry::bench
