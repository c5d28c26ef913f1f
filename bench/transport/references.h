// The references measured beside ferry in one run, by id:
//   raw_tcp      a raw TCP ping-pong (raw_tcp_pingpong.h)
//   raw_fabric   a raw libfabric RDM floor (raw_fabric_pingpong.h)
//   fi_pingpong  libfabric's own fi_pingpong (fi_pingpong_reference.h)
// Each plugin has a default set (DefaultReferences); --references overrides
// it. Both processes build the same list from the same options, in the same
// order, so the measurement loop mirrors without negotiation. Set-up follows
// one pattern for every reference: the peer opens it and puts one word (its
// address) in the READY line; the client connects to it; the peer accepts.
#pragma once

#include "common/status.h"
#include "transport/buffers.h"
#include "transport/measure.h"
#include "transport/options.h"
#include "transport/peer_process.h"
#include "transport/pingpong.h"

#include <memory>
#include <string>
#include <vector>

namespace ferry::bench {

struct ReferenceInfo {
  std::string id;           // "raw_tcp": --references name and JSON key
  std::string label;        // "raw TCP": tables and plots
  std::string description;  // what it does, for the JSON and the docs
  bool batch = false;       // times itself: compared by means, not medians
};

// What opening a reference may need.
struct ReferenceContext {
  const Options* options = nullptr;
  PollMode mode = PollMode::kBusy;
  BufferSet* buffers = nullptr;
  ControlChannel* control = nullptr;  // for references that sync per run
};

class ReferenceServer {
 public:
  virtual ~ReferenceServer() = default;
  // One word (no spaces) the client needs to connect; "-" when none.
  virtual std::string address() const = 0;
  // Completes the set-up once the client has connected.
  virtual Status Accept(int timeout_ms) = 0;
  virtual ServerSide side() = 0;
};

class ReferenceClient {
 public:
  virtual ~ReferenceClient() = default;
  virtual ClientSide side() = 0;
  // One line on how it ran (the raw floor's provider, path, mr_mode).
  virtual std::string detail() const { return ""; }
};

// The default set of a plugin (by the name it reports).
std::vector<std::string> DefaultReferences(const std::string& plugin_name);

// Checks that every id is known and built in, and resolves what the fabric
// references need (the provider) into *options. `plugin_name` decides
// whether the plugin's own `provider` parameter must follow.
Status ResolveReferences(const std::string& plugin_name, Options* options);

// The ids that run in a suite of `mode` (fi_pingpong spins: busy only).
std::vector<std::string> ReferencesFor(const Options& options, PollMode mode);

ReferenceInfo DescribeReference(const std::string& id, const Options& options);

StatusOr<std::unique_ptr<ReferenceServer>> OpenReferenceServer(
    const std::string& id, const ReferenceContext& context);
StatusOr<std::unique_ptr<ReferenceClient>> ConnectReferenceClient(
    const std::string& id, const ReferenceContext& context,
    const std::string& address, int timeout_ms);

}  // namespace ferry::bench
