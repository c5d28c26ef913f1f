// The one measurement loop both implementations go through. For every size
// of the plan the client runs, in this order, with the peer mirroring it:
//   1. round trips: `warmup` untimed, then `iters` each timed on its own
//      (steady_clock around RoundTrip), raw and ferry one after the other
//      (which goes first alternates by size, so neither always inherits the
//      other's warm caches or TCP state);
//   2. for streamed sizes: one untimed burst, then `stream_reps` timed bursts
//      of `stream_messages` messages, raw and ferry likewise.
// The echo is checked byte for byte after the timed round trips.
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
