// The schedule of one suite: for every size, how many untimed warm-up and
// timed round trips, and whether (and how long) a streaming test runs. Both
// processes compute it from the same options, so the echoing side knows each
// message's size in advance and the raw floor needs no framing at all.
#pragma once

#include "transport/options.h"

#include <cstdint>
#include <vector>

namespace ferry::bench {

struct SizePlan {
  uint64_t size = 0;
  uint32_t warmup = 0;          // untimed round trips before the timed ones
  uint32_t iters = 0;           // timed round trips
  uint32_t stream_messages = 0; // per burst; 0 = no streaming test
  uint32_t stream_reps = 0;     // timed bursts (one untimed burst first)
};

// Large sizes get fewer round trips so that each size moves about
// `options.budget` bytes per direction (never fewer than min_iters);
// streamed sizes send about budget/4 bytes per burst, at least 2 windows.
std::vector<SizePlan> BuildPlan(const Options& options);

// The largest message of the plan (buffers are sized by it).
uint64_t MaxSize(const std::vector<SizePlan>& plan);

}  // namespace ferry::bench
