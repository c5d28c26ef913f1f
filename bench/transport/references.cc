#include "transport/references.h"

#include "loader/host_services.h"
#include "transport/external_program.h"
#include "transport/fi_pingpong_reference.h"
#include "transport/raw_tcp_pingpong.h"

#ifdef FERRY_BENCH_HAVE_LIBFABRIC
#include "transport/raw_fabric_endpoint.h"
#include "transport/raw_fabric_pingpong.h"
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace ferry::bench {
namespace {

const char kRawTcp[] = "raw_tcp";
const char kRawFabric[] = "raw_fabric";
const char kFiPingPong[] = "fi_pingpong";

// ---- raw_tcp ---------------------------------------------------------------

class RawTcpServer final : public ReferenceServer {
 public:
  RawTcpServer(std::unique_ptr<RawTcpListener> listener, PollMode mode,
               BufferSet* buffers)
      : listener_(std::move(listener)), mode_(mode), buffers_(buffers) {}
  std::string address() const override { return listener_->address(); }
  Status Accept(int timeout_ms) override {
    auto fd = listener_->Accept(timeout_ms);
    if (!fd.ok()) return fd.status();
    pingpong_.reset(new RawTcpPingPong(fd.value(), mode_, buffers_));
    return Status();
  }
  ServerSide side() override { return {pingpong_.get(), nullptr}; }

 private:
  std::unique_ptr<RawTcpListener> listener_;
  PollMode mode_;
  BufferSet* buffers_;
  std::unique_ptr<RawTcpPingPong> pingpong_;
};

class RawTcpClient final : public ReferenceClient {
 public:
  explicit RawTcpClient(std::unique_ptr<RawTcpPingPong> pp)
      : pingpong_(std::move(pp)) {}
  ClientSide side() override { return {"raw tcp", pingpong_.get(), nullptr}; }

 private:
  std::unique_ptr<RawTcpPingPong> pingpong_;
};

// ---- raw_fabric ------------------------------------------------------------

#ifdef FERRY_BENCH_HAVE_LIBFABRIC
class RawFabricServer final : public ReferenceServer {
 public:
  explicit RawFabricServer(std::unique_ptr<RawFabricPingPong> pp)
      : pingpong_(std::move(pp)) {}
  std::string address() const override { return pingpong_->address(); }
  Status Accept(int timeout_ms) override {
    return pingpong_->Accept(timeout_ms);
  }
  ServerSide side() override { return {pingpong_.get(), nullptr}; }

 private:
  std::unique_ptr<RawFabricPingPong> pingpong_;
};

class RawFabricClient final : public ReferenceClient {
 public:
  explicit RawFabricClient(std::unique_ptr<RawFabricPingPong> pp)
      : pingpong_(std::move(pp)) {}
  ClientSide side() override {
    return {"raw fabric", pingpong_.get(), nullptr};
  }
  std::string detail() const override { return pingpong_->Describe(); }

 private:
  std::unique_ptr<RawFabricPingPong> pingpong_;
};
#endif

// ---- fi_pingpong -----------------------------------------------------------

class FiPingPongServerRef final : public ReferenceServer {
 public:
  FiPingPongServerRef(const std::string& program, const std::string& provider,
                      ControlChannel* control)
      : server_(program, provider, control) {}
  // Each run gets its own port, announced over the control channel.
  std::string address() const override { return "-"; }
  Status Accept(int) override { return Status(); }
  ServerSide side() override { return {nullptr, &server_}; }

 private:
  FiPingPongServer server_;
};

class FiPingPongClientRef final : public ReferenceClient {
 public:
  FiPingPongClientRef(const std::string& program, const std::string& provider,
                      ControlChannel* control)
      : client_(program, provider, control),
        detail_(program + " -p '" + provider + "' -e rdm") {}
  ClientSide side() override { return {"fi_pingpong", nullptr, &client_}; }
  std::string detail() const override { return detail_; }

 private:
  FiPingPongClient client_;
  std::string detail_;
};

}  // namespace

std::vector<std::string> DefaultReferences(const std::string& plugin_name) {
  // fabric: what libfabric itself achieves on the same provider (the
  // targets are set against these); raw TCP says nothing about RDMA.
  if (plugin_name == "fabric") return {kFiPingPong, kRawFabric};
  return {kRawTcp};
}

Status ResolveReferences(const std::string& plugin_name, Options* o) {
  if (!o->references_given) o->references = DefaultReferences(plugin_name);
  std::vector<std::string> kept;
  bool fabric = false;
  for (const std::string& id : o->references) {
    if (std::find(kept.begin(), kept.end(), id) != kept.end()) continue;
    if (id == kRawTcp) {
      kept.push_back(id);
      continue;
    }
    if (id != kRawFabric && id != kFiPingPong) {
      return Status(FERRY_INVALID_ARGUMENT,
                    "--references: unknown reference '" + id +
                        "' (known: raw_tcp, raw_fabric, fi_pingpong)");
    }
    std::string missing;
#ifndef FERRY_BENCH_HAVE_LIBFABRIC
    missing = "this benchmark was built without libfabric-dev";
#endif
    if (missing.empty() && id == kFiPingPong && FindProgram(kFiPingPong).empty()) {
      missing = "fi_pingpong is not on PATH (Debian: apt-get install libfabric-bin)";
    }
    if (!missing.empty()) {
      if (o->references_given) {
        return Status(FERRY_UNAVAILABLE,
                      "--references " + id + ": " + missing);
      }
      std::fprintf(stderr, "note: reference %s skipped: %s\n", id.c_str(),
                   missing.c_str());
      continue;
    }
    fabric = true;
    kept.push_back(id);
  }
  o->references = kept;
  if (!fabric) return Status();
  if (o->fabric_provider.empty()) {
    const char* env = std::getenv("FERRY_FABRIC_PROVIDER");
    if (env != nullptr) o->fabric_provider = env;
  }
#ifdef FERRY_BENCH_HAVE_LIBFABRIC
  if (o->fabric_provider.empty()) o->fabric_provider = DefaultFabricProvider();
#endif
  if (o->fabric_provider.empty()) {
    return Status(FERRY_UNAVAILABLE,
                  "the fabric references need a libfabric provider: set "
                  "FERRY_FABRIC_PROVIDER or --fabric-provider");
  }
  // The plugin follows, so that ferry and the references run on the same
  // provider whatever libfabric would have chosen for each.
  if (plugin_name == "fabric") {
    SetPluginParam("fabric", "provider", o->fabric_provider);
  }
  return Status();
}

std::vector<std::string> ReferencesFor(const Options& o, PollMode mode) {
  std::vector<std::string> ids;
  for (const std::string& id : o.references) {
    if (id == kFiPingPong && mode != PollMode::kBusy) continue;
    ids.push_back(id);
  }
  return ids;
}

ReferenceInfo DescribeReference(const std::string& id, const Options& o) {
  ReferenceInfo r;
  r.id = id;
  if (id == kRawTcp) {
    r.label = "raw TCP";
    r.description =
        "plain TCP on 127.0.0.1, non-blocking, TCP_NODELAY, default socket "
        "buffers, no framing, same buffers and same polling mode";
  } else if (id == kRawFabric) {
    r.label = "raw libfabric (" + o.fabric_provider + ")";
    r.description =
        "libfabric directly, provider '" + o.fabric_provider +
        "', FI_EP_RDM, buffers registered once (mr_mode honoured), one "
        "fi_writedata of the whole message into the peer's registered buffer "
        "(remote CQ data marks the arrival; path msg: one fi_tsend into a "
        "pre-posted receive), fi_inject* up to inject_size; CQ spun (busy) or "
        "slept on (sleep); same buffers";
  } else if (id == kFiPingPong) {
    r.label = "fi_pingpong (" + o.fabric_provider + ")";
    r.batch = true;
    r.description =
        "libfabric's fi_pingpong -p '" + o.fabric_provider +
        "' -e rdm -S size -I n, server and client pinned like the peer and "
        "this process; fi_send (fi_inject below inject_size) and fi_recv, "
        "CQs spun; it reports the mean of half round trips (usec/xfer), "
        "doubled here; mean round trip = (elapsed of a warmup+n run - "
        "elapsed of a warmup run) / n, which removes its connection set-up";
  }
  return r;
}

StatusOr<std::unique_ptr<ReferenceServer>> OpenReferenceServer(
    const std::string& id, const ReferenceContext& c) {
  if (id == kRawTcp) {
    auto listener = RawTcpListener::Open();
    if (!listener.ok()) return listener.status();
    return std::unique_ptr<ReferenceServer>(new RawTcpServer(
        std::move(listener).value(), c.mode, c.buffers));
  }
#ifdef FERRY_BENCH_HAVE_LIBFABRIC
  if (id == kRawFabric) {
    auto pp = RawFabricPingPong::Open(c.options->fabric_provider,
                                      c.options->raw_fabric_path, c.mode,
                                      c.buffers);
    if (!pp.ok()) return pp.status();
    return std::unique_ptr<ReferenceServer>(
        new RawFabricServer(std::move(pp).value()));
  }
#endif
  if (id == kFiPingPong) {
    return std::unique_ptr<ReferenceServer>(new FiPingPongServerRef(
        FindProgram(kFiPingPong), c.options->fabric_provider, c.control));
  }
  return Status(FERRY_INVALID_ARGUMENT, "unknown reference '" + id + "'");
}

StatusOr<std::unique_ptr<ReferenceClient>> ConnectReferenceClient(
    const std::string& id, const ReferenceContext& c,
    const std::string& address, int timeout_ms) {
  if (id == kRawTcp) {
    auto fd = RawTcpConnect(address);
    if (!fd.ok()) return fd.status();
    return std::unique_ptr<ReferenceClient>(new RawTcpClient(
        std::make_unique<RawTcpPingPong>(fd.value(), c.mode, c.buffers)));
  }
#ifdef FERRY_BENCH_HAVE_LIBFABRIC
  if (id == kRawFabric) {
    auto pp = RawFabricPingPong::Open(c.options->fabric_provider,
                                      c.options->raw_fabric_path, c.mode,
                                      c.buffers);
    if (!pp.ok()) return pp.status();
    Status st = pp.value()->Connect(address, timeout_ms);
    if (!st.ok()) return st;
    return std::unique_ptr<ReferenceClient>(
        new RawFabricClient(std::move(pp).value()));
  }
#endif
  (void)timeout_ms;
  (void)address;
  if (id == kFiPingPong) {
    return std::unique_ptr<ReferenceClient>(new FiPingPongClientRef(
        FindProgram(kFiPingPong), c.options->fabric_provider, c.control));
  }
  return Status(FERRY_INVALID_ARGUMENT, "unknown reference '" + id + "'");
}

}  // namespace ferry::bench
