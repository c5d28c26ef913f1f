#include "transport/plan.h"

#include <algorithm>

namespace ferry::bench {
namespace {

constexpr uint64_t kSettleRoundTrips = 4000;
constexpr uint64_t kSettleBytes = 64ull << 20;

}  // namespace

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
    // Rounds: the shorter each turn, the less a drift of a shared machine's
    // speed (a VM's can move by tens of percent within a minute) lands on
    // one implementation only; few long turns make the ratio swing from run
    // to run. A round of ~500 round trips keeps the warm-up per round (a
    // tenth) small.
    const uint32_t rounds =
        o.rounds != 0 ? o.rounds : std::clamp<uint32_t>(p.iters / 500, 4, 20);
    p.rounds = std::max<uint32_t>(1, std::min(rounds, p.iters));
    p.warmup = std::max<uint32_t>(2, std::min<uint32_t>(1000, p.iters / 10 / p.rounds));
    // Settling, once per size before the first round: a transport's first
    // passes through memory it has not touched yet cost a page fault per
    // page, in both processes (libfabric's shm provider writes each message
    // into the next slot of a command queue in a shared mapping, so the
    // first ~1 000 round trips of a connection fault every few round trips).
    // A batch reference (fi_pingpong) amortizes those faults over its long
    // run; settling first compares steady state with steady state. Capped
    // in bytes so that large sizes, which fault nothing new, stay cheap,
    // and at half the timed count so that a short (smoke) run stays short.
    p.settle = std::max<uint32_t>(
        p.warmup, static_cast<uint32_t>(std::min<uint64_t>(
                      {kSettleRoundTrips, kSettleBytes / size, p.iters / 2})));
    if (o.stream && size >= o.stream_min) {
      const uint64_t burst = std::max<uint64_t>(1, (o.budget / 4) / size);
      p.stream_messages = static_cast<uint32_t>(
          std::min<uint64_t>(1u << 20, std::max<uint64_t>(2ull * o.window, burst)));
      p.stream_reps = o.stream_reps;
    }
    plan.push_back(p);
  }
  return plan;
}

uint32_t WarmupBeforeRound(const SizePlan& p, uint32_t round) {
  return round == 0 ? p.settle : p.warmup;
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
