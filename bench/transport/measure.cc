#include "transport/measure.h"

#include <sys/resource.h>

#include <chrono>
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

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

Status RoundTrips(const SizePlan& p, PingPongClient* impl, BufferSet* buffers,
                  const char* label, ImplResult* out) {
  // Clear the landing zone so the check below proves this implementation
  // delivered the bytes.
  std::memset(buffers->recv[0]->data(), 0, p.size);
  for (uint32_t i = 0; i < p.warmup; ++i) {
    Status st = impl->RoundTrip(p.size);
    if (!st.ok()) return st;
  }
  std::vector<double> samples;
  samples.reserve(p.iters);
  const LoopCounters before = impl->counters();
  const CpuTime cpu_before = ProcessCpuTime();
  for (uint32_t i = 0; i < p.iters; ++i) {
    const auto t0 = Clock::now();
    Status st = impl->RoundTrip(p.size);
    const auto t1 = Clock::now();
    if (!st.ok()) return st;
    samples.push_back(
        std::chrono::duration<double, std::nano>(t1 - t0).count());
  }
  const CpuTime cpu_after = ProcessCpuTime();
  const LoopCounters after = impl->counters();
  if (std::memcmp(buffers->send->data(), buffers->recv[0]->data(), p.size) !=
      0) {
    return Status(FERRY_DATA_LOSS, std::string(label) + ": the " +
                                       std::to_string(p.size) +
                                       "-byte echo differs from what was sent");
  }
  out->rtt_ns = Summarize(&samples);
  out->bw_rtt_Bps = 2.0 * static_cast<double>(p.size) /
                    (out->rtt_ns.median * 1e-9);
  out->calls_per_rt = static_cast<double>(after.calls - before.calls) / p.iters;
  out->waits_per_rt = static_cast<double>(after.waits - before.waits) / p.iters;
  out->user_ns_per_rt = (cpu_after.user_ns - cpu_before.user_ns) / p.iters;
  out->sys_ns_per_rt = (cpu_after.sys_ns - cpu_before.sys_ns) / p.iters;
  return Status();
}

Status Streams(const SizePlan& p, uint32_t window, PingPongClient* impl,
               ImplResult* out) {
  std::vector<double> bps;
  for (uint32_t rep = 0; rep <= p.stream_reps; ++rep) {
    const auto t0 = Clock::now();
    Status st = impl->Stream(p.size, p.stream_messages, window);
    const auto t1 = Clock::now();
    if (!st.ok()) return st;
    if (rep == 0) continue;  // untimed warm-up burst
    bps.push_back(static_cast<double>(p.size) * p.stream_messages /
                  Seconds(t0, t1));
  }
  out->stream_Bps = Summarize(&bps);
  return Status();
}

}  // namespace

Status MeasureSize(const SizePlan& p, uint32_t window, size_t index,
                   PingPongClient* raw, PingPongClient* ferry,
                   BufferSet* buffers, SizeResult* out) {
  out->plan = p;
  struct Side {
    PingPongClient* impl;
    ImplResult* result;
    const char* label;
  };
  Side order[2] = {{raw, &out->raw, "raw tcp"}, {ferry, &out->ferry, "ferry"}};
  if (index % 2 == 1) std::swap(order[0], order[1]);
  for (const Side& s : order) {
    if (s.impl == nullptr) continue;  // --only
    Status st = RoundTrips(p, s.impl, buffers, s.label, s.result);
    if (!st.ok()) return st;
  }
  if (p.stream_messages == 0) return Status();
  for (const Side& s : order) {
    if (s.impl == nullptr) continue;
    Status st = Streams(p, window, s.impl, s.result);
    if (!st.ok()) return st;
  }
  return Status();
}

Status ServeSize(const SizePlan& p, uint32_t window, size_t index,
                 PingPongServer* raw, PingPongServer* ferry) {
  PingPongServer* order[2] = {raw, ferry};
  if (index % 2 == 1) std::swap(order[0], order[1]);
  for (PingPongServer* impl : order) {
    if (impl == nullptr) continue;  // --only
    for (uint32_t i = 0; i < p.warmup + p.iters; ++i) {
      Status st = impl->Echo(p.size);
      if (!st.ok()) return st;
    }
    Status st = impl->Flush();
    if (!st.ok()) return st;
  }
  if (p.stream_messages == 0) return Status();
  for (PingPongServer* impl : order) {
    if (impl == nullptr) continue;
    for (uint32_t rep = 0; rep <= p.stream_reps; ++rep) {
      Status st = impl->StreamSink(p.size, p.stream_messages, window);
      if (!st.ok()) return st;
    }
    Status st = impl->Flush();
    if (!st.ok()) return st;
  }
  return Status();
}

}  // namespace ferry::bench
