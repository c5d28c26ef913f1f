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
    return static_cast<double>(tv.tv_sec) * 1e9 +
           static_cast<double>(tv.tv_usec) * 1e3;
  };
  return {ns(ru.ru_utime), ns(ru.ru_stime)};
}

// One implementation's raw material for a size, accumulated over rounds.
struct Accumulator {
  PingPongClient* impl = nullptr;
  BatchPingPongClient* batch = nullptr;
  ImplResult* result = nullptr;
  std::string label;
  std::vector<double> rtt_ns;
  std::vector<double> stream_Bps;
  LoopCounters counters;
  CpuTime cpu{0, 0};
  BatchResult batch_result;
};

// `warmup` untimed round trips, then `iters` timed one by one; the echo is
// checked byte for byte afterwards (outside the timed region).
Status RoundTrips(const SizePlan& p, uint32_t iters, BufferSet* buffers,
                  Accumulator* acc) {
  // Clear the landing zone so the check proves this implementation
  // delivered the bytes in this round.
  std::memset(buffers->recv[0]->data(), 0, p.size);
  for (uint32_t i = 0; i < p.warmup; ++i) {
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
    acc->rtt_ns.push_back(
        std::chrono::duration<double, std::nano>(t1 - t0).count());
  }
  const CpuTime cpu_after = ProcessCpuTime();
  const LoopCounters after = acc->impl->counters();
  if (std::memcmp(buffers->send->data(), buffers->recv[0]->data(), p.size) !=
      0) {
    return Status(FERRY_DATA_LOSS, acc->label + ": the " +
                                       std::to_string(p.size) +
                                       "-byte echo differs from what was sent");
  }
  acc->counters.calls += after.calls - before.calls;
  acc->counters.waits += after.waits - before.waits;
  acc->cpu.user_ns += cpu_after.user_ns - cpu_before.user_ns;
  acc->cpu.sys_ns += cpu_after.sys_ns - cpu_before.sys_ns;
  return Status();
}

Status Burst(const SizePlan& p, uint32_t window, bool timed,
             Accumulator* acc) {
  const auto t0 = Clock::now();
  Status st = acc->impl->Stream(p.size, p.stream_messages, window);
  const auto t1 = Clock::now();
  if (!st.ok()) return st;
  if (timed) {
    acc->stream_Bps.push_back(
        static_cast<double>(p.size) * p.stream_messages /
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
    out->rtt_ns.count = acc->batch_result.iters;
    out->rtt_ns.mean = acc->batch_result.mean_rtt_ns;
    out->rtt_ns.min = out->rtt_ns.median = out->rtt_ns.p90 =
        out->rtt_ns.p99 = out->rtt_ns.max = unknown;
    out->bw_rtt_Bps = unknown;
    out->bw_rtt_mean_Bps = 2.0 * size / (out->rtt_ns.mean * 1e-9);
    out->calls_per_rt = out->waits_per_rt = unknown;
    out->user_ns_per_rt = out->sys_ns_per_rt = unknown;
    out->method = acc->batch_result.method;
    out->note = acc->batch_result.note;
    return;
  }
  const double n = static_cast<double>(acc->rtt_ns.size());
  out->rtt_ns = Summarize(&acc->rtt_ns);
  out->bw_rtt_Bps = 2.0 * size / (out->rtt_ns.median * 1e-9);
  out->bw_rtt_mean_Bps = 2.0 * size / (out->rtt_ns.mean * 1e-9);
  out->stream_Bps = Summarize(&acc->stream_Bps);
  out->calls_per_rt = static_cast<double>(acc->counters.calls) / n;
  out->waits_per_rt = static_cast<double>(acc->counters.waits) / n;
  out->user_ns_per_rt = acc->cpu.user_ns / n;
  out->sys_ns_per_rt = acc->cpu.sys_ns / n;
}

// The k-th implementation to run in round `round` of size `index`, of `n`
// round-trip implementations: the order rotates, so none always inherits
// another's warm caches or TCP state. With one reference and ferry this is
// the alternation raw, ferry / ferry, raw. The peer computes the same order.
size_t Turn(size_t index, uint32_t round, size_t k, size_t n) {
  return (index + round + k) % n;
}

// Batch references run once per size, after this round: the middle of the
// size's measurement, so a drift of the machine during the size hits them
// as it hits the others on average.
uint32_t BatchRound(const SizePlan& p) { return (p.rounds - 1) / 2; }

// Timed round trips for a batch reference: the plan's count, or more, so
// that the batch lasts at least kMinBatchSeconds at the pace of the fastest
// implementation measured so far in this size. A batch is one block of
// time around a fixed start-up cost that varies (fi_pingpong on
// tcp;ofi_rxm: 40-120 ms of connection set-up, subtracted with a second
// run): the longer the batch, the smaller that variation's share.
constexpr double kMinBatchSeconds = 2.0;
constexpr uint32_t kMaxBatchFactor = 20;

uint32_t BatchIters(const SizePlan& p, const std::vector<Accumulator>& rt) {
  double fastest_ns = 0;
  for (const Accumulator& a : rt) {
    if (a.rtt_ns.empty()) continue;
    std::vector<double> copy = a.rtt_ns;
    auto mid = copy.begin() + static_cast<std::ptrdiff_t>(copy.size() / 2);
    std::nth_element(copy.begin(), mid, copy.end());
    if (fastest_ns == 0 || *mid < fastest_ns) fastest_ns = *mid;
  }
  if (fastest_ns <= 0) return p.iters;
  const double wanted = kMinBatchSeconds * 1e9 / fastest_ns;
  const double capped =
      std::min(wanted, static_cast<double>(p.iters) * kMaxBatchFactor);
  return std::max(p.iters, static_cast<uint32_t>(capped));
}

}  // namespace

Status MeasureSize(const SizePlan& p, uint32_t window, size_t index,
                   PingPongClient* ferry, const std::vector<ClientSide>& refs,
                   BufferSet* buffers, SizeResult* out) {
  out->plan = p;
  out->refs.assign(refs.size(), ImplResult());
  // Round-trip implementations in rotation order: the references, then
  // ferry; batch references apart.
  std::vector<Accumulator> rt;
  std::vector<Accumulator> batch;
  for (size_t i = 0; i < refs.size(); ++i) {
    Accumulator a;
    a.label = refs[i].label;
    a.result = &out->refs[i];
    if (refs[i].batch != nullptr) {
      a.batch = refs[i].batch;
      batch.push_back(std::move(a));
    } else {
      a.impl = refs[i].pingpong;  // null with --only ferry
      rt.push_back(std::move(a));
    }
  }
  {
    Accumulator a;
    a.label = "ferry";
    a.impl = ferry;
    a.result = &out->ferry;
    rt.push_back(std::move(a));
  }
  for (Accumulator& a : rt) a.rtt_ns.reserve(p.iters);
  for (uint32_t round = 0; round < p.rounds; ++round) {
    for (size_t k = 0; k < rt.size(); ++k) {
      Accumulator& a = rt[Turn(index, round, k, rt.size())];
      if (a.impl == nullptr) continue;  // --only
      Status st = RoundTrips(p, ItersInRound(p, round), buffers, &a);
      if (!st.ok()) return st;
    }
    if (round != BatchRound(p)) continue;
    const uint32_t batch_iters = BatchIters(p, rt);
    for (Accumulator& a : batch) {
      Status st = a.batch->Run(p.size, p.warmup, batch_iters, &a.batch_result);
      if (!st.ok()) return Status(st.code(), a.label + ": " + st.message());
    }
  }
  // Streaming: one untimed burst each, then timed bursts in rotation.
  for (uint32_t rep = 0; p.stream_messages > 0 && rep <= p.stream_reps;
       ++rep) {
    for (size_t k = 0; k < rt.size(); ++k) {
      Accumulator& a = rt[Turn(index, rep, k, rt.size())];
      if (a.impl == nullptr) continue;
      Status st = Burst(p, window, rep > 0, &a);
      if (!st.ok()) return st;
    }
  }
  for (Accumulator& a : rt) {
    if (a.impl != nullptr) Finish(p, &a);
  }
  for (Accumulator& a : batch) Finish(p, &a);
  return Status();
}

Status ServeSize(const SizePlan& p, uint32_t window, size_t index,
                 PingPongServer* ferry, const std::vector<ServerSide>& refs) {
  std::vector<PingPongServer*> rt;
  std::vector<BatchPingPongServer*> batch;
  for (const ServerSide& r : refs) {
    if (r.batch != nullptr) {
      batch.push_back(r.batch);
    } else {
      rt.push_back(r.pingpong);
    }
  }
  rt.push_back(ferry);
  for (uint32_t round = 0; round < p.rounds; ++round) {
    for (size_t k = 0; k < rt.size(); ++k) {
      PingPongServer* impl = rt[Turn(index, round, k, rt.size())];
      if (impl == nullptr) continue;  // --only
      const uint32_t n = p.warmup + ItersInRound(p, round);
      for (uint32_t i = 0; i < n; ++i) {
        Status st = impl->Echo(p.size);
        if (!st.ok()) return st;
      }
      // Its last reply must leave before the next implementation runs.
      Status st = impl->Flush();
      if (!st.ok()) return st;
    }
    if (round != BatchRound(p)) continue;
    for (BatchPingPongServer* b : batch) {
      Status st = b->Serve(p.size);
      if (!st.ok()) return st;
    }
  }
  for (uint32_t rep = 0; p.stream_messages > 0 && rep <= p.stream_reps;
       ++rep) {
    for (size_t k = 0; k < rt.size(); ++k) {
      PingPongServer* impl = rt[Turn(index, rep, k, rt.size())];
      if (impl == nullptr) continue;
      Status st = impl->StreamSink(p.size, p.stream_messages, window);
      if (st.ok()) st = impl->Flush();
      if (!st.ok()) return st;
    }
  }
  return Status();
}

}  // namespace ferry::bench
