#include "transport/fabric_references.h"

#include "loader/host_services.h"
#include "transport/external_program.h"
#include "transport/fi_pingpong_reference.h"
#ifdef FERRY_BENCH_HAVE_LIBFABRIC
#include "transport/raw_fabric_endpoint.h"
#include "transport/raw_fabric_pingpong.h"
#endif

#include <cstdlib>
#include <memory>

namespace ferry::bench {
namespace {

const char kFiPingPong[] = "fi_pingpong";

ReferenceInfo RawFabricInfo(const Options& o) {
  return {"raw", "raw libfabric (" + o.fabric_provider + ")",
          "libfabric directly on provider '" + o.fabric_provider +
              "', FI_EP_RDM, buffers registered once (mr_mode honoured), "
              "one fi_writedata of the whole message into the peer's "
              "registered buffer whose remote CQ data marks the arrival "
              "(--raw-fabric-path msg, or no FI_RMA: one fi_tsend into a "
              "pre-posted receive), fi_inject* up to inject_size; the CQ "
              "spun (busy) or slept on (sleep); same buffers",
          false, false};
}

ReferenceInfo FiPingPongInfo(const Options& o) {
  return {kFiPingPong, "fi_pingpong (" + o.fabric_provider + ")",
          "libfabric's fi_pingpong -p '" + o.fabric_provider +
              "' -e rdm -S size -I n, server and client inheriting the peer's "
              "and this process's CPU pinning; fi_send (fi_inject below "
              "inject_size) and fi_recv, CQs spun; it reports the mean of "
              "half round trips (usec/xfer), doubled here; mean round trip = "
              "(elapsed of a warmup+n run - elapsed of a warmup run) / n, "
              "which removes its connection set-up; busy mode only",
          false, true};
}

#ifdef FERRY_BENCH_HAVE_LIBFABRIC
class RawFabricReference final : public Reference {
 public:
  explicit RawFabricReference(const Options& o)
      : info_(RawFabricInfo(o)), provider_(o.fabric_provider), path_(o.raw_fabric_path) {}
  const ReferenceInfo& info() const override { return info_; }
  StatusOr<std::unique_ptr<ReferenceListener>> Listen(PollMode mode,
                                                      BufferSet* buffers) override {
    auto pp = RawFabricPingPong::Open(provider_, path_, mode, buffers);
    if (!pp.ok()) return pp.status();
    return std::unique_ptr<ReferenceListener>(
        new SelfAcceptingListener<RawFabricPingPong, &RawFabricPingPong::Accept>(
            std::move(pp).value()));
  }
  // Sends the hello and returns; the peer's answer is read on first use.
  StatusOr<std::unique_ptr<PingPongClient>> Connect(const std::string& address,
                                                    PollMode mode,
                                                    BufferSet* buffers) override {
    auto pp = RawFabricPingPong::Open(provider_, path_, mode, buffers);
    if (!pp.ok()) return pp.status();
    Status st = pp.value()->Connect(address);
    if (!st.ok()) return st;
    return std::unique_ptr<PingPongClient>(std::move(pp).value());
  }

 private:
  ReferenceInfo info_;
  std::string provider_, path_;
};
#endif

class FiPingPongReference final : public Reference {
 public:
  FiPingPongReference(const Options& o, std::string program)
      : info_(FiPingPongInfo(o)),
        provider_(o.fabric_provider),
        program_(std::move(program)) {}
  const ReferenceInfo& info() const override { return info_; }
  StatusOr<std::unique_ptr<ReferenceListener>> Listen(PollMode, BufferSet*) override {
    return Status(FERRY_UNIMPLEMENTED, "fi_pingpong is a batch reference");
  }
  StatusOr<std::unique_ptr<PingPongClient>> Connect(const std::string&, PollMode,
                                                    BufferSet*) override {
    return Status(FERRY_UNIMPLEMENTED, "fi_pingpong is a batch reference");
  }
  StatusOr<std::unique_ptr<BatchPingPongServer>> ListenBatch(
      ControlChannel* control) override {
    return std::unique_ptr<BatchPingPongServer>(
        new FiPingPongServer(program_, provider_, control));
  }
  StatusOr<std::unique_ptr<BatchPingPongClient>> ConnectBatch(
      ControlChannel* control) override {
    return std::unique_ptr<BatchPingPongClient>(
        new FiPingPongClient(program_, provider_, control));
  }

 private:
  ReferenceInfo info_;
  std::string provider_, program_;
};

}  // namespace

Status ResolveFabricProvider(const std::string& plugin_name, Options* o) {
  if (plugin_name != "fabric") return Status();
  if (o->fabric_provider.empty()) {
    const char* env = std::getenv("FERRY_FABRIC_PROVIDER");
    if (env != nullptr) o->fabric_provider = env;
  }
#ifdef FERRY_BENCH_HAVE_LIBFABRIC
  if (o->fabric_provider.empty()) o->fabric_provider = DefaultFabricProvider();
#endif
  if (o->fabric_provider.empty()) {
    return Status(FERRY_UNAVAILABLE,
                  "no libfabric provider for the fabric references: set "
                  "FERRY_FABRIC_PROVIDER or --fabric-provider");
  }
  SetPluginParam("fabric", "provider", o->fabric_provider);
  return Status();
}

void AddFabricReferences(const Options& o, ReferenceSet* set) {
#ifdef FERRY_BENCH_HAVE_LIBFABRIC
  set->measured.push_back(std::make_unique<RawFabricReference>(o));
#else
  set->skipped.push_back({RawFabricInfo(o),
                          "not built: libfabric-dev was not found when the "
                          "benchmark was configured"});
#endif
  const std::string program = FindProgram(kFiPingPong);
  if (program.empty()) {
    set->skipped.push_back(
        {FiPingPongInfo(o),
         "fi_pingpong is not on PATH (Debian: apt-get install libfabric-bin)"});
  } else {
    set->measured.push_back(std::make_unique<FiPingPongReference>(o, program));
  }
}

}  // namespace ferry::bench
