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
  uint32_t warmup = 0;           // untimed round trips before each round
  uint32_t settle = 0;           // ... before the first round instead
  uint32_t iters = 0;            // timed round trips, over all rounds
  uint32_t rounds = 1;           // raw and ferry alternate this many times
  uint32_t stream_messages = 0;  // per burst; 0 = no streaming test
  uint32_t stream_reps = 0;      // timed bursts (one untimed burst first)
};

// Large sizes get fewer round trips so that each size moves about
// `options.budget` bytes per direction (never fewer than min_iters);
// streamed sizes send about budget/4 bytes per burst, at least 2 windows.
std::vector<SizePlan> BuildPlan(const Options& options);

// Timed round trips in round `round` (the first rounds take the remainder).
uint32_t ItersInRound(const SizePlan& plan, uint32_t round);

// Untimed round trips before round `round`: `settle` before the first,
// `warmup` before every other.
uint32_t WarmupBeforeRound(const SizePlan& plan, uint32_t round);

// The largest message of the plan (buffers are sized by it).
uint64_t MaxSize(const std::vector<SizePlan>& plan);

}  // namespace ferry::bench
