#include "transport/measure.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace ferry::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct CpuTime {
  double user_ns, sys_ns;
};

CpuTime ProcessCpuTime() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto ns = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) * 1e9 + static_cast<double>(tv.tv_usec) * 1e3;
  };
  return {ns(ru.ru_utime), ns(ru.ru_stime)};
}

// One implementation's raw material for a size, accumulated over rounds.
struct Accumulator {
  PingPongClient* impl = nullptr;
  BatchPingPongClient* batch = nullptr;
  // A batch reference's batches, pooled: timed round trips and their time
  // (batches without a figure are left out, their note kept).
  uint64_t batch_iters = 0;
  double batch_ns = 0;
  uint32_t batch_count = 0;
  std::string batch_method;  // the first batch's
  std::string batch_note;
  ImplResult* result = nullptr;
  const char* label = "";
  std::vector<double> rtt_ns;
  double loop_ns = 0;  // the rounds' loops timed whole (RoundTrips)
  uint64_t loop_count = 0;
  std::vector<double> stream_Bps;
  LoopCounters counters;
  CpuTime cpu{0, 0};
};

// Untimed round trips (WarmupBeforeRound), then `iters` timed one by one,
// then `iters` more timed as one loop; the echo is checked byte for byte
// afterwards (outside the timed region).
Status RoundTrips(const SizePlan& p, uint32_t round, BufferSet* buffers, Accumulator* acc,
                  const SampleLog& samples) {
  const uint32_t iters = ItersInRound(p, round);
  // Clear the landing zone so the check proves this implementation
  // delivered the bytes in this round.
  std::memset(buffers->recv[0]->data(), 0, p.size);
  const uint32_t warmup = WarmupBeforeRound(p, round);
  for (uint32_t i = 0; i < warmup; ++i) {
    Status st = acc->impl->RoundTrip(p.size);
    if (!st.ok()) return st;
  }
  const LoopCounters before = acc->impl->counters();
  const CpuTime cpu_before = ProcessCpuTime();
  for (uint32_t i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    Status st = acc->impl->RoundTrip(p.size);
    const auto t1 = Clock::now();
    if (!st.ok()) return st;
    acc->rtt_ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
  }
  const CpuTime cpu_after = ProcessCpuTime();
  const LoopCounters after = acc->impl->counters();
  // Then as many again, timed as one loop: the mean a batch reference
  // reports (fi_pingpong reads the clock around its whole loop). Reading
  // the clock around every round trip puts about one clock read (~25 ns on
  // the AMD VM) inside each timed interval, which a 64-byte round trip of
  // ~0.7 us feels; the loop's mean is free of it.
  const auto loop_start = Clock::now();
  for (uint32_t i = 0; i < iters; ++i) {
    Status st = acc->impl->RoundTrip(p.size);
    if (!st.ok()) return st;
  }
  acc->loop_ns +=
      std::chrono::duration<double, std::nano>(Clock::now() - loop_start).count();
  acc->loop_count += iters;
  if (samples.file != nullptr) {  // after the clock stopped for this round
    std::fprintf(samples.file, "%s %llu %u %s\t", samples.mode,
                 static_cast<unsigned long long>(p.size), round, acc->label);
    const size_t first = acc->rtt_ns.size() - iters;
    for (size_t i = first; i < acc->rtt_ns.size(); ++i) {
      std::fprintf(samples.file, i == first ? "%.0f" : " %.0f", acc->rtt_ns[i]);
    }
    std::fputc('\n', samples.file);
  }
  if (std::memcmp(buffers->send->data(), buffers->recv[0]->data(), p.size) != 0) {
    return Status(FERRY_DATA_LOSS, std::string(acc->label) + ": the " +
                                       std::to_string(p.size) +
                                       "-byte echo differs from what was sent");
  }
  acc->counters.calls += after.calls - before.calls;
  acc->counters.waits += after.waits - before.waits;
  acc->cpu.user_ns += cpu_after.user_ns - cpu_before.user_ns;
  acc->cpu.sys_ns += cpu_after.sys_ns - cpu_before.sys_ns;
  return Status();
}

Status Burst(const SizePlan& p, uint32_t window, bool timed, Accumulator* acc) {
  const auto t0 = Clock::now();
  Status st = acc->impl->Stream(p.size, p.stream_messages, window);
  const auto t1 = Clock::now();
  if (!st.ok()) return st;
  if (timed) {
    acc->stream_Bps.push_back(static_cast<double>(p.size) * p.stream_messages /
                              std::chrono::duration<double>(t1 - t0).count());
  }
  return Status();
}

void Finish(const SizePlan& p, Accumulator* acc) {
  ImplResult* out = acc->result;
  const double size = static_cast<double>(p.size);
  if (acc->batch != nullptr) {
    // Only the mean exists; every other statistic is unknown, not zero.
    const double unknown = std::nan("");
    out->rtt_ns.count = acc->batch_iters;
    out->rtt_ns.mean = acc->batch_iters > 0
                           ? acc->batch_ns / static_cast<double>(acc->batch_iters)
                           : unknown;
    out->rtt_ns.min = out->rtt_ns.median = out->rtt_ns.p90 = out->rtt_ns.p99 =
        out->rtt_ns.max = unknown;
    out->bw_rtt_Bps = unknown;
    out->bw_rtt_mean_Bps = 2.0 * size / (out->rtt_ns.mean * 1e-9);
    out->loop_rtt_ns = out->rtt_ns.mean;  // it timed itself as one loop
    out->bw_loop_Bps = out->bw_rtt_mean_Bps;
    out->calls_per_rt = out->waits_per_rt = unknown;
    out->user_ns_per_rt = out->sys_ns_per_rt = unknown;
    out->method = acc->batch_method;
    if (acc->batch_count > 1) {
      out->method += " in the first batch; " + std::to_string(acc->batch_count) +
                     " batches pooled: their round trips' total time / their count";
    }
    out->note = acc->batch_note;
    return;
  }
  const double n = static_cast<double>(acc->rtt_ns.size());
  out->rtt_ns = Summarize(&acc->rtt_ns);
  out->bw_rtt_Bps = 2.0 * size / (out->rtt_ns.median * 1e-9);
  out->bw_rtt_mean_Bps = 2.0 * size / (out->rtt_ns.mean * 1e-9);
  if (acc->loop_count > 0) {
    out->loop_rtt_ns = acc->loop_ns / static_cast<double>(acc->loop_count);
    out->bw_loop_Bps = 2.0 * size / (out->loop_rtt_ns * 1e-9);
  }
  out->stream_Bps = Summarize(&acc->stream_Bps);
  out->calls_per_rt = static_cast<double>(acc->counters.calls) / n;
  out->waits_per_rt = static_cast<double>(acc->counters.waits) / n;
  out->user_ns_per_rt = acc->cpu.user_ns / n;
  out->sys_ns_per_rt = acc->cpu.sys_ns / n;
}

// Which implementation goes first in round `round` of size `index`: it
// rotates, so none always inherits another's warm caches or TCP state. The
// peer computes the same order.
size_t Nth(size_t index, uint32_t round, size_t k, size_t n) {
  return (index + round + k) % n;
}

// Batch references run after kBatches evenly spaced rounds (every round
// when there are fewer), each with its share of the round trips: on a
// machine whose speed shifts within seconds (a VM whose vCPUs the host
// moves), a single batch would catch one state while the other
// implementations' rounds catch a mix; spread out, they sample the same
// mix. Four, not one per round: each batch starts fi_pingpong's two
// processes two or three times (~0.3 s each).
constexpr uint32_t kBatches = 4;
uint32_t Batches(const SizePlan& p) {
  return std::min(p.rounds, kBatches);
}
bool IsBatchRound(const SizePlan& p, uint32_t round) {
  const uint32_t b = Batches(p);
  return (round * b) / p.rounds != ((round + 1) * b) / p.rounds;
}
// Timed round trips of the batch after `round`: the rounds since the
// previous batch.
uint32_t BatchIters(const SizePlan& p, uint32_t round) {
  uint32_t iters = 0;
  for (uint32_t r = round + 1; r-- > 0;) {
    if (r != round && IsBatchRound(p, r)) break;
    iters += ItersInRound(p, r);
  }
  return iters;
}

void PoolBatch(const BatchResult& r, Accumulator* acc) {
  if (acc->batch_count == 0) acc->batch_method = r.method;
  if (!(r.mean_rtt_ns > 0)) {
    if (acc->batch_note.empty()) acc->batch_note = r.note;
    return;
  }
  ++acc->batch_count;
  acc->batch_iters += r.iters;
  acc->batch_ns += r.mean_rtt_ns * r.iters;
}

}  // namespace

Status MeasureSize(const SizePlan& p, uint32_t window, size_t index,
                   const std::vector<Contender>& contenders, BufferSet* buffers,
                   const SampleLog& samples) {
  const size_t n = contenders.size();
  std::vector<Accumulator> sides(n);
  for (size_t i = 0; i < n; ++i) {
    sides[i].impl = contenders[i].client;
    sides[i].batch = contenders[i].batch;
    sides[i].result = contenders[i].result;
    sides[i].label = contenders[i].label;
    sides[i].rtt_ns.reserve(p.iters);
  }
  for (uint32_t round = 0; round < p.rounds; ++round) {
    for (size_t k = 0; k < n; ++k) {
      Accumulator& a = sides[Nth(index, round, k, n)];
      if (a.impl == nullptr) continue;  // --only, or a batch reference
      Status st = RoundTrips(p, round, buffers, &a, samples);
      if (st.ok()) st = a.impl->EndRun();
      if (!st.ok()) return st;
    }
    if (!IsBatchRound(p, round)) continue;
    for (Accumulator& a : sides) {
      if (a.batch == nullptr) continue;
      BatchResult r;
      Status st =
          a.batch->Run(p.size, p.warmup, BatchIters(p, round), 1.0 / Batches(p), &r);
      if (!st.ok()) return Status(st.code(), std::string(a.label) + ": " + st.message());
      PoolBatch(r, &a);
    }
  }
  // Streaming: one untimed burst each, then timed bursts in rotation.
  for (uint32_t rep = 0; p.stream_messages > 0 && rep <= p.stream_reps; ++rep) {
    for (size_t k = 0; k < n; ++k) {
      Accumulator& a = sides[Nth(index, rep, k, n)];
      if (a.impl == nullptr) continue;
      Status st = Burst(p, window, rep > 0, &a);
      if (st.ok()) st = a.impl->EndRun();
      if (!st.ok()) return st;
    }
  }
  for (Accumulator& a : sides) {
    if (a.impl != nullptr || a.batch != nullptr) Finish(p, &a);
  }
  return Status();
}

Status ServeSize(const SizePlan& p, uint32_t window, size_t index, BufferSet* buffers,
                 const std::vector<PingPongServer*>& sides,
                 const std::vector<BatchPingPongServer*>& batches) {
  const size_t n = sides.size();
  for (uint32_t round = 0; round < p.rounds; ++round) {
    for (size_t k = 0; k < n; ++k) {
      PingPongServer* impl = sides[Nth(index, round, k, n)];
      if (impl == nullptr) continue;  // --only, or a batch reference
      // Warm-up, the round trips timed one by one, the same number timed
      // as a loop (RoundTrips).
      const uint32_t count = WarmupBeforeRound(p, round) + 2 * ItersInRound(p, round);
      for (uint32_t i = 0; i < count; ++i) {
        Status st = impl->Echo(p.size);
        if (!st.ok()) return st;
      }
      // Its last reply must leave before the next implementation runs.
      Status st = impl->Flush();
      if (!st.ok()) return st;
      if (std::memcmp(buffers->reply->data(), buffers->recv[0]->data(), p.size) != 0) {
        return Status(FERRY_DATA_LOSS,
                      "peer: a " + std::to_string(p.size) + "-byte request (round " +
                          std::to_string(round) + ", implementation " +
                          std::to_string(Nth(index, round, k, n) + 1) +
                          " of the rotation) differs from what the client sent");
      }
    }
    if (!IsBatchRound(p, round)) continue;
    for (BatchPingPongServer* b : batches) {
      Status st = b->Serve(p.size);
      if (!st.ok()) return st;
    }
  }
  for (uint32_t rep = 0; p.stream_messages > 0 && rep <= p.stream_reps; ++rep) {
    for (size_t k = 0; k < n; ++k) {
      PingPongServer* impl = sides[Nth(index, rep, k, n)];
      if (impl == nullptr) continue;
      Status st = impl->StreamSink(p.size, p.stream_messages, window);
      if (st.ok()) st = impl->Flush();
      if (!st.ok()) return st;
    }
  }
  return Status();
}

}  // namespace ferry::bench
