// The one measurement loop both implementations go through. For every size
// of the plan the client runs, in this order, with the peer mirroring it:
//   1. `rounds` rounds of round trips; in each, raw and then ferry (or ferry
//      and then raw: the order alternates by round and by size) run `warmup`
//      untimed round trips and their share of `iters` timed ones, each timed
//      on its own (steady_clock around RoundTrip). Alternating in rounds
//      means a drift of the machine (another tenant, frequency, the host)
//      lands on both columns alike instead of on whichever ran second;
//   2. for streamed sizes: one untimed burst each, then `stream_reps` timed
//      bursts of `stream_messages` messages, raw and ferry alternating.
// The echo is checked byte for byte after every round.
#pragma once

#include "common/status.h"
#include "transport/buffers.h"
#include "transport/pingpong.h"
#include "transport/plan.h"
#include "transport/stats.h"

#include <cstdint>

namespace ferry::bench {

struct ImplResult {
  Summary rtt_ns;             // round-trip time, nanoseconds
  double bw_rtt_Bps = 0;      // 2 * size / median round trip (NetPIPE's
                              // convention: size / half the round trip)
  Summary stream_Bps;         // streaming bandwidth per burst, bytes/s
                              // (count 0 when the size is not streamed)
  double calls_per_rt = 0;    // progress() or send/recv calls per round trip
  double waits_per_rt = 0;    // poll() sleeps per round trip
  double user_ns_per_rt = 0;  // this process's user CPU time per round trip
  double sys_ns_per_rt = 0;   // and its kernel CPU time (getrusage)
};

struct SizeResult {
  SizePlan plan;
  ImplResult ferry;
  ImplResult raw;
};

// Client side of one size: fills *out. A null implementation is skipped
// (--only, for profiling one side alone); its result stays empty.
Status MeasureSize(const SizePlan& plan, uint32_t window, size_t index,
                   PingPongClient* raw, PingPongClient* ferry,
                   BufferSet* buffers, SizeResult* out);

// Peer side of one size: the same exchanges, in the same order.
Status ServeSize(const SizePlan& plan, uint32_t window, size_t index,
                 PingPongServer* raw, PingPongServer* ferry);

}  // namespace ferry::bench
