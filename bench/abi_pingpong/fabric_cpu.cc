// ferry-bench-fabric-cpu: what the fabric plugin's 64-byte round trip costs
// the CPU beside libfabric's own, on the same provider, in ONE thread.
//
// The transport benchmark's 64-byte round trip on a 2-vCPU VM swings by a
// third from minute to minute (vCPU placement, neighbours), so two builds or
// two designs compared there need many alternating runs. With both sides in
// one thread there is no cross-core transfer and no scheduling: what is
// left is the work each round trip runs, which is what the plugin adds to
// the provider. Both run here in alternating rounds of a few thousand round
// trips, so a drift of the machine's speed hits both alike, and the ratio
// is taken round by round (paired).
//
//   libfabric   two RDM endpoints on the provider, fi_pingpong's loop: the
//               64-byte payload by fi_inject, the receive completion read
//               with fi_cq_read, the receive posted again with fi_recv;
//   ferry       two contexts of the plugin through its C ABI (abi_pair.h):
//               send() of a 16-byte header and the 64-byte segment,
//               progress() until ARRIVAL, the inline bytes copied out,
//               discard(), SEND_DONE.
//
// Usage: ferry-bench-fabric-cpu [--plugin PATH] [--provider P]
//                               [--rounds N] [--per-round N] [--json FILE]
// Provider: --provider, else $FERRY_FABRIC_PROVIDER, else libfabric's first
// RDM provider; the plugin is told the same one.
#include "abi_pingpong/abi_pair.h"
#include "transport/raw_fabric_endpoint.h"

#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace ferry::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kPayload = 64;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "ferry-bench-fabric-cpu: %s\n", what.c_str());
  std::exit(1);
}

template <typename T>
T Check(StatusOr<T> v) {
  if (!v.ok()) Die(v.status().ToString());
  return std::move(v).value();
}

// fi_pingpong's exchange between two endpoints of this process.
class RawPair {
 public:
  explicit RawPair(const std::string& provider) {
    for (Side* s : {&a_, &b_}) {
      s->ep =
          Check(RawFabricEndpoint::Open(provider, /*want_rma=*/false, PollMode::kBusy));
      s->region = Check(s->ep->Register(s->rx, sizeof s->rx));
    }
    a_.peer = Check(a_.ep->InsertPeer(b_.ep->name()));
    b_.peer = Check(b_.ep->InsertPeer(a_.ep->name()));
    for (Side* s : {&a_, &b_}) PostRecv(*s);
  }
  const std::string& provider() const { return a_.ep->provider(); }

  void RoundTrips(long n) {
    for (long i = 0; i < n; ++i) {
      Inject(a_, b_);
      Receive(b_, a_);
      Inject(b_, a_);
      Receive(a_, b_);
    }
  }

 private:
  struct Side {
    std::unique_ptr<RawFabricEndpoint> ep;
    RawFabricRegion region;
    fi_addr_t peer = 0;
    char rx[kPayload] = {};
    char tx[kPayload] = {};
  };

  void PostRecv(Side& s) {
    ssize_t rc;
    while ((rc = fi_recv(s.ep->ep(), s.rx, sizeof s.rx, s.region.desc, FI_ADDR_UNSPEC,
                         nullptr)) == -FI_EAGAIN) {
      Progress(s);
    }
    if (rc != 0) Die(s.ep->Error("fi_recv", rc).ToString());
  }
  void Inject(Side& from, Side& to) {
    ssize_t rc;
    while ((rc = fi_inject(from.ep->ep(), from.tx, kPayload, from.peer)) == -FI_EAGAIN) {
      Progress(from);
      Progress(to);
    }
    if (rc != 0) Die(from.ep->Error("fi_inject", rc).ToString());
  }
  // One thread drives both endpoints, so the one not waited for is polled
  // too (rxm moves bytes only inside its own progress); it has nothing to
  // complete.
  void Receive(Side& s, Side& other) {
    while (Progress(s) == 0) {
      if (Progress(other) != 0) Die("a completion on the side that expected none");
    }
    PostRecv(s);
    std::memcpy(s.tx, s.rx, kPayload);  // what the echo sends back
  }
  size_t Progress(Side& s) {
    fi_cq_data_entry c[4];
    return Check(s.ep->Poll(c, 4));
  }

  Side a_, b_;
};

struct Series {
  std::vector<double> ns;  // per round trip, one entry per round
  double Quantile(double q) const {
    std::vector<double> v = ns;
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
  }
};

template <typename Fn>
double TimePerRoundTrip(long n, Fn&& fn) {
  const auto t0 = Clock::now();
  fn(n);
  const auto t1 = Clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() /
         static_cast<double>(n);
}

int Main(int argc, char** argv) {
  std::string plugin = FERRY_BENCH_FABRIC_PLUGIN_PATH;
  const char* env_provider = std::getenv("FERRY_FABRIC_PROVIDER");
  std::string provider = env_provider != nullptr ? env_provider : "";
  std::string json;
  long rounds = 200, per_round = 2000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--plugin")
      plugin = next();
    else if (a == "--provider")
      provider = next();
    else if (a == "--rounds")
      rounds = std::atol(next().c_str());
    else if (a == "--per-round")
      per_round = std::atol(next().c_str());
    else if (a == "--json")
      json = next();
    else
      Die("unknown option " + a + " (see the comment at the top of fabric_cpu.cc)");
  }
  if (rounds < 2 || per_round < 1)
    Die("--rounds must be at least 2 and --per-round at least 1");
  if (provider.empty()) provider = DefaultFabricProvider();
  if (provider.empty()) Die("libfabric offers no RDM provider on this machine");
  setenv("FERRY_FABRIC_PROVIDER", provider.c_str(), 1);  // the plugin's too

  RawPair raw(provider);
  auto ferry = AbiPair::Open(plugin, /*busy=*/true);
  auto run_raw = [&](long n) { raw.RoundTrips(n); };
  auto run_ferry = [&](long n) { ferry->RoundTrips(n, 0); };
  // Warm-up: caches, the provider's first-touch faults (its command queue).
  run_raw(10 * per_round);
  run_ferry(10 * per_round);
  Series r, f;
  std::vector<double> ratio;
  for (long k = 0; k < rounds; ++k) {
    double tr, tf;
    if (k % 2 == 0) {
      tr = TimePerRoundTrip(per_round, run_raw);
      tf = TimePerRoundTrip(per_round, run_ferry);
    } else {
      tf = TimePerRoundTrip(per_round, run_ferry);
      tr = TimePerRoundTrip(per_round, run_raw);
    }
    r.ns.push_back(tr);
    f.ns.push_back(tf);
    ratio.push_back(tf / tr);
  }
  Series q{ratio};
  std::printf(
      "one thread, provider %s, %ld rounds of %ld round trips each, alternating\n",
      raw.provider().c_str(), rounds, per_round);
  std::printf("  %-58s median %7.1f ns  p10 %7.1f  p90 %7.1f\n",
              "libfabric (fi_inject, fi_cq_read, fi_recv; 64 B)", r.Quantile(0.5),
              r.Quantile(0.1), r.Quantile(0.9));
  std::printf("  %-58s median %7.1f ns  p10 %7.1f  p90 %7.1f\n",
              "ferry fabric plugin (C ABI; 16 B header + 64 B segment)", f.Quantile(0.5),
              f.Quantile(0.1), f.Quantile(0.9));
  std::printf(
      "  ferry / libfabric, round by round: median %.3fx (p10 %.3fx, p90 %.3fx); "
      "ferry adds %.1f ns per round trip\n",
      q.Quantile(0.5), q.Quantile(0.1), q.Quantile(0.9),
      f.Quantile(0.5) - r.Quantile(0.5));
  if (!json.empty()) {
    FILE* out = std::fopen(json.c_str(), "w");
    if (out == nullptr) Die("cannot write " + json + ": " + std::strerror(errno));
    std::fprintf(out,
                 "{\"benchmark\": \"ferry-bench-fabric-cpu\", \"provider\": \"%s\", "
                 "\"rounds\": %ld, \"round_trips_per_round\": %ld, "
                 "\"libfabric_ns\": {\"median\": %.1f, \"p10\": %.1f, \"p90\": %.1f}, "
                 "\"ferry_ns\": {\"median\": %.1f, \"p10\": %.1f, \"p90\": %.1f}, "
                 "\"ratio\": {\"median\": %.4f, \"p10\": %.4f, \"p90\": %.4f}}\n",
                 raw.provider().c_str(), rounds, per_round, r.Quantile(0.5),
                 r.Quantile(0.1), r.Quantile(0.9), f.Quantile(0.5), f.Quantile(0.1),
                 f.Quantile(0.9), q.Quantile(0.5), q.Quantile(0.1), q.Quantile(0.9));
    std::fclose(out);
  }
  return 0;
}

}  // namespace
}  // namespace ferry::bench

int main(int argc, char** argv) {
  return ferry::bench::Main(argc, argv);
}
