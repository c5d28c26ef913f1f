#include "transport/plan.h"

#include <algorithm>

namespace ferry::bench {

const char* PollModeName(PollMode mode) {
  return mode == PollMode::kBusy ? "busy" : "sleep";
}

std::vector<SizePlan> BuildPlan(const Options& o) {
  std::vector<SizePlan> plan;
  for (uint64_t size : o.sizes) {
    SizePlan p;
    p.size = size;
    const uint64_t by_budget = std::max<uint64_t>(1, o.budget / size);
    p.iters = static_cast<uint32_t>(
        std::max<uint64_t>(o.min_iters, std::min<uint64_t>(o.iters, by_budget)));
    // Warm-up: caches, TCP's congestion window and the socket buffers' auto-
    // tuning all need a few exchanges before they settle.
    p.rounds = std::max<uint32_t>(1, std::min(o.rounds, p.iters));
    p.warmup = std::max<uint32_t>(
        2, std::min<uint32_t>(1000, p.iters / 10 / p.rounds));
    if (o.stream && size >= o.stream_min) {
      const uint64_t burst = std::max<uint64_t>(1, (o.budget / 4) / size);
      p.stream_messages = static_cast<uint32_t>(std::min<uint64_t>(
          1u << 20, std::max<uint64_t>(2ull * o.window, burst)));
      p.stream_reps = o.stream_reps;
    }
    plan.push_back(p);
  }
  return plan;
}

uint32_t ItersInRound(const SizePlan& p, uint32_t round) {
  return p.iters / p.rounds + (round < p.iters % p.rounds ? 1 : 0);
}

uint64_t MaxSize(const std::vector<SizePlan>& plan) {
  uint64_t max = 0;
  for (const SizePlan& p : plan) max = std::max(max, p.size);
  return max;
}

}  // namespace ferry::bench
