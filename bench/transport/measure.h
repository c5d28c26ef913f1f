// The one measurement loop every implementation goes through (ferry and the
// references measured with it). For every size of the plan the client runs,
// in this order, with the peer mirroring it:
//   1. `rounds` rounds of round trips; in each, every implementation in turn
//      (the order rotates by round and by size: with two, raw and then ferry,
//      or ferry and then raw) runs `warmup` untimed round trips and its share
//      of `iters` timed ones, each timed on its own (steady_clock around
//      RoundTrip), then as many again timed as one loop (two clock reads
//      around them all: the loop mean, comparable with a batch reference's,
//      which times itself that way). Rotating in rounds means a drift of the
//      machine (another tenant, frequency, the host) lands on every column
//      alike instead of on whichever ran last;
//   2. batch references (an external program that times itself:
//      fi_pingpong) run after four evenly spaced rounds (every round when
//      there are fewer), with the same warm-up and at least the round trips
//      of the rounds since the last batch, pooled; they are compared by
//      loop means;
//   3. for streamed sizes: one untimed burst each, then `stream_reps` timed
//      bursts of `stream_messages` messages, in the same rotation.
// The echo is checked byte for byte after every round.
#pragma once

#include "common/status.h"
#include "transport/buffers.h"
#include "transport/pingpong.h"
#include "transport/plan.h"
#include "transport/stats.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace ferry::bench {

struct ImplResult {
  Summary rtt_ns;              // round-trip time, nanoseconds (a batch
                               // reference has only count and mean; the
                               // other statistics are NaN)
  double bw_rtt_Bps = 0;       // 2 * size / median round trip (NetPIPE's
                               // convention: size / half the round trip)
  double bw_rtt_mean_Bps = 0;  // 2 * size / mean round trip
  double loop_rtt_ns = 0;      // mean round trip of loops timed whole (no
                               // clock read between round trips), as a
                               // batch reference times itself; the basis
                               // of comparison with one
  double bw_loop_Bps = 0;      // 2 * size / loop_rtt_ns
  Summary stream_Bps;          // streaming bandwidth per burst, bytes/s
                               // (count 0 when the size is not streamed)
  double calls_per_rt = 0;     // progress() or send/recv calls per round trip
  double waits_per_rt = 0;     // poll() sleeps per round trip
  double user_ns_per_rt = 0;   // this process's user CPU time per round trip
  double sys_ns_per_rt = 0;    // and its kernel CPU time (getrusage)
  std::string method;          // batch references: how the mean was derived
  std::string note;            // batch references: why a figure is missing
};

struct SizeResult {
  SizePlan plan;
  ImplResult ferry;
  std::vector<ImplResult> references;  // parallel to RunInfo::references
};

// One implementation as MeasureSize sees it. A null client is skipped
// (--only, for profiling one side alone) but keeps its place in the
// rotation, so both processes agree on the order; its result stays empty.
struct Contender {
  const char* label;  // for error messages
  PingPongClient* client;
  ImplResult* result;
  BatchPingPongClient* batch = nullptr;  // a batch reference (client null)
};

// --samples: every timed round trip, one line per implementation and round:
//   MODE SIZE ROUND LABEL<TAB>ns ns ns ...
// in the order they ran, so a tail can be placed within its round (after
// another implementation's turn, or spread evenly):
// bench/transport/samples_by_position.py reads it.
struct SampleLog {
  std::FILE* file = nullptr;  // null: not recorded
  const char* mode = "";
};

// Client side of one size: fills each contender's result.
Status MeasureSize(const SizePlan& plan, uint32_t window, size_t index,
                   const std::vector<Contender>& contenders, BufferSet* buffers,
                   const SampleLog& samples = {});

// Peer side of one size: the same exchanges, in the same order; `servers`
// are in the client's contender order (null where the client's is).
// `batches`: the batch references' servers, in the client's order. After
// each implementation's round, the last request in recv[0] must match the
// reply buffer (the client sends the same bytes).
Status ServeSize(const SizePlan& plan, uint32_t window, size_t index, BufferSet* buffers,
                 const std::vector<PingPongServer*>& servers,
                 const std::vector<BatchPingPongServer*>& batches = {});

}  // namespace ferry::bench
