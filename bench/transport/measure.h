// The one measurement loop every implementation goes through. For every size
// of the plan the client runs, in this order, with the peer mirroring it:
//   1. `rounds` rounds of round trips; in each, ferry and every round-trip
//      reference run, one after the other, `warmup` untimed round trips and
//      their share of `iters` timed ones, each timed on its own (steady_clock
//      around RoundTrip). The order rotates by round and by size. Alternating
//      in rounds means a drift of the machine (another tenant, frequency, the
//      host) lands on every column alike instead of on whichever ran last;
//   2. batch references (an external program that times itself) run once,
//      in the middle of the rounds, with the same warm-up and `iters` or
//      more timed round trips (at least 2 s at the pace of the fastest
//      implementation so far: see BatchIters in measure.cc);
//   3. for streamed sizes: one untimed burst each, then `stream_reps` timed
//      bursts of `stream_messages` messages, rotating like the rounds.
// The echo is checked byte for byte after every round.
#pragma once

#include "common/status.h"
#include "transport/buffers.h"
#include "transport/pingpong.h"
#include "transport/plan.h"
#include "transport/stats.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ferry::bench {

struct ImplResult {
  Summary rtt_ns;             // round-trip time, nanoseconds (a batch
                              // reference has only count and mean; the
                              // other statistics are NaN)
  double bw_rtt_Bps = 0;      // 2 * size / median round trip (NetPIPE's
                              // convention: size / half the round trip)
  double bw_rtt_mean_Bps = 0; // 2 * size / mean round trip
  Summary stream_Bps;         // streaming bandwidth per burst, bytes/s
                              // (count 0 when the size is not streamed)
  double calls_per_rt = 0;    // progress() or send/recv calls per round trip
  double waits_per_rt = 0;    // poll() sleeps per round trip
  double user_ns_per_rt = 0;  // this process's user CPU time per round trip
  double sys_ns_per_rt = 0;   // and its kernel CPU time (getrusage)
  std::string method;         // batch references: how the mean was derived
  std::string note;           // batch references: why a figure is missing
};

struct SizeResult {
  SizePlan plan;
  ImplResult ferry;
  std::vector<ImplResult> refs;  // parallel to the suite's references
};

// A reference as the loop sees it: exactly one of the two is set, or
// neither (--only ferry: the reference is skipped, its result stays empty).
struct ClientSide {
  std::string label;  // for messages
  PingPongClient* pingpong = nullptr;
  BatchPingPongClient* batch = nullptr;
};
struct ServerSide {
  PingPongServer* pingpong = nullptr;
  BatchPingPongServer* batch = nullptr;
};

// Client side of one size: fills *out. A null `ferry` (--only raw) and
// references without an implementation (--only ferry) are skipped.
Status MeasureSize(const SizePlan& plan, uint32_t window, size_t index,
                   PingPongClient* ferry, const std::vector<ClientSide>& refs,
                   BufferSet* buffers, SizeResult* out);

// Peer side of one size: the same exchanges, in the same order.
Status ServeSize(const SizePlan& plan, uint32_t window, size_t index,
                 PingPongServer* ferry, const std::vector<ServerSide>& refs);

}  // namespace ferry::bench
