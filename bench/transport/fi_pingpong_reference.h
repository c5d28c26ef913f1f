// libfabric's own ping-pong, fi_pingpong (Debian: libfabric-bin), run as a
// reference in the same run as ferry's fabric plugin: the same provider
// (-p), the same endpoint type (-e rdm), the size (-S) and iteration count
// (-I) of each size of the plan. The server half runs in the peer process's
// place and the client half in the benchmark's, so each inherits that
// process's CPU pinning; both of ours wait in waitpid() meanwhile.
//
// What fi_pingpong reports, and how it is converted (fabtests
// util/pingpong.c, 1.17): per size, "usec/xfer" = elapsed / iterations / 2,
// i.e. HALF a round trip, averaged; "MB/sec" = 2 * size * iterations /
// elapsed. The mean round trip is therefore 2 * usec/xfer. Its timed loop
// has no warm-up and includes the first message, which on tcp;ofi_rxm sets
// up the connection (40-120 ms here). So each measurement is two runs: one
// of `warmup` iterations and one of `warmup + iters`, and the mean round
// trip is the difference of their elapsed times divided by `iters`: what
// remains is steady state, the way the other columns are measured. When
// that difference lasted under 2 s, one longer run (about 2 s, at most 20x
// the count) replaces the long one, so that the set-up's variation (tens of
// ms) stays around 1% of it. The
// client decides each run's iteration count and sends it to the server over
// the control channel, with the port coming back.
//
// fi_pingpong spins on its CQs (FI_WAIT_NONE): it is a busy-mode reference.
#pragma once

#include "common/status.h"
#include "transport/peer_process.h"
#include "transport/pingpong.h"

#include <cstdint>
#include <string>

namespace ferry::bench {

// One line of fi_pingpong's table.
struct FiPingPongReport {
  double usec_per_xfer = 0;  // mean half round trip, microseconds
};

// Parses fi_pingpong's stdout: the line after the "bytes #sent ..." header.
StatusOr<FiPingPongReport> ParseFiPingPongOutput(const std::string& text);

class FiPingPongClient final : public BatchPingPongClient {
 public:
  // `program`: absolute path of fi_pingpong; `control`: borrowed, carries
  // the server's port.
  FiPingPongClient(std::string program, std::string provider, ControlChannel* control)
      : program_(std::move(program)), provider_(std::move(provider)), control_(control) {}
  Status Run(uint64_t size, uint32_t warmup, uint32_t iters, double share,
             BatchResult* out) override;

 private:
  // One fi_pingpong client run of `iters` round trips; returns its elapsed
  // time in microseconds.
  StatusOr<double> RunOnce(uint64_t size, uint32_t iters);

  std::string program_, provider_;
  ControlChannel* control_;
};

class FiPingPongServer final : public BatchPingPongServer {
 public:
  FiPingPongServer(std::string program, std::string provider, ControlChannel* control)
      : program_(std::move(program)), provider_(std::move(provider)), control_(control) {}
  Status Serve(uint64_t size) override;

 private:
  Status ServeOnce(uint64_t size, uint32_t iters);

  std::string program_, provider_;
  ControlChannel* control_;
};

// The iteration count of the short (warm-up) run: at least one round trip,
// which absorbs the connection set-up.
uint32_t FiPingPongWarmup(uint32_t warmup);

}  // namespace ferry::bench
