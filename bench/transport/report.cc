#include "transport/report.h"

#include "transport/describe.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

namespace ferry::bench {
namespace {

// NaN (printed "nan", JSON null) when a side was not measured (--only).
double Ratio(double a, double b) {
  return a > 0 && b > 0 ? a / b : std::nan("");
}

// A minimal JSON emitter: the benchmark needs objects, arrays, strings and
// numbers, and no dependency for that.
class Json {
 public:
  std::string str() const { return out_.str(); }
  void Open(char c) {
    Sep();
    out_ << c;
    first_ = true;
    ++depth_;
  }
  void Close(char c) {
    --depth_;
    Newline();
    out_ << c;
    first_ = false;
  }
  void Key(const std::string& k) {
    Sep();
    String(k);
    out_ << ": ";
    after_key_ = true;
  }
  void Str(const std::string& s) {
    Sep();
    String(s);
  }
  void Num(double v) {
    Sep();
    if (!std::isfinite(v)) {
      out_ << "null";
      return;
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    out_ << buf;
  }
  void Int(uint64_t v) {
    Sep();
    out_ << v;
  }
  void Bool(bool v) {
    Sep();
    out_ << (v ? "true" : "false");
  }

 private:
  void Sep() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (!first_) out_ << ",";
    if (depth_ > 0) Newline();
    first_ = false;
  }
  void Newline() { out_ << "\n" << std::string(2 * depth_, ' '); }
  void String(const std::string& s) {
    out_ << '"';
    for (unsigned char c : s) {
      if (c == '"' || c == '\\') {
        out_ << '\\' << c;
      } else if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out_ << buf;
      } else {
        out_ << c;
      }
    }
    out_ << '"';
  }
  std::ostringstream out_;
  bool first_ = true;
  bool after_key_ = false;
  int depth_ = 0;
};

void SummaryJson(Json& j, const Summary& s) {
  j.Open('{');
  j.Key("count"); j.Int(s.count);
  j.Key("min"); j.Num(s.min);
  j.Key("median"); j.Num(s.median);
  j.Key("p90"); j.Num(s.p90);
  j.Key("p99"); j.Num(s.p99);
  j.Key("max"); j.Num(s.max);
  j.Key("mean"); j.Num(s.mean);
  j.Close('}');
}

void ImplJson(Json& j, const ImplResult& r, bool streamed) {
  j.Open('{');
  j.Key("rtt_ns"); SummaryJson(j, r.rtt_ns);
  j.Key("bw_rtt_Bps"); j.Num(r.bw_rtt_Bps);
  if (streamed) {
    j.Key("stream_Bps");
    SummaryJson(j, r.stream_Bps);
  }
  j.Key("calls_per_rt"); j.Num(r.calls_per_rt);
  j.Key("waits_per_rt"); j.Num(r.waits_per_rt);
  j.Key("user_cpu_ns_per_rt"); j.Num(r.user_ns_per_rt);
  j.Key("sys_cpu_ns_per_rt"); j.Num(r.sys_ns_per_rt);
  j.Close('}');
}

void LoadJson(Json& j, const std::array<double, 3>& l) {
  j.Open('[');
  for (double v : l) j.Num(v);
  j.Close(']');
}

const char* ModeText(PollMode mode) {
  return mode == PollMode::kBusy
             ? "busy: ferry spins on progress(), raw spins on non-blocking "
               "recv()/send()"
             : "sleep: ferry poll()s the wakeup fd when progress() has "
               "nothing, raw poll()s the socket on EAGAIN";
}

}  // namespace

void PrintHeader(std::FILE* out, const RunInfo& run) {
  const MachineInfo& m = run.machine;
  std::fprintf(out, "ferry-bench-transport: %s %s (%s, ABI %u.%u) vs raw TCP\n",
               run.plugin_name.c_str(), run.plugin_version.c_str(),
               run.plugin_path.c_str(), run.abi_major, run.abi_minor);
  std::fprintf(out, "machine: %ld CPUs, %s, %s\n", m.nproc,
               m.cpu_model.c_str(), m.kernel.c_str());
  if (run.pinned) {
    std::fprintf(out, "pinning: this process on CPU %d, peer on CPU %d\n",
                 run.options.cpu_self, run.options.cpu_peer);
  } else {
    std::fprintf(out, "pinning: none (figures are noisier)\n");
  }
  std::fprintf(out, "date: %s\n", m.date_utc.c_str());
}

void PrintSuite(std::FILE* out, const RunInfo& run, const SuiteResult& s) {
  std::fprintf(out, "\n== mode %s ==\n", PollModeName(s.mode));
  std::fprintf(out, "%s\n", ModeText(s.mode));
  std::fprintf(out, "ferry context: %s%s%s\n", s.description.c_str(),
               s.wakeup_fd ? "; wakeup fd" : "; no wakeup fd",
               s.registered ? "; buffers registered" : "");
  std::fprintf(out,
               "load average before/after: %.2f / %.2f (1 min); %.1f s\n",
               s.loadavg_before[0], s.loadavg_after[0], s.seconds);
  std::fprintf(out,
               "round trip (us): median and p99 of n timed round trips (raw "
               "and ferry alternating in %u rounds);\n"
               "rt bw = 2*size/median round trip; "
               "stream bw = median of %u bursts with %u messages in flight "
               "(raw: back-to-back writes); MB/s = 1e6 B/s\n",
               run.options.rounds, run.options.stream_reps,
               run.options.window);
  std::fprintf(out,
               "%6s %6s | %9s %9s | %9s %9s | %5s %5s | %8s %8s %5s | %8s "
               "%8s %5s\n",
               "size", "n", "ferry med", "p99", "raw med", "p99", "ratio",
               "p99", "ferry rt", "raw rt", "ratio", "ferry st", "raw st",
               "ratio");
  std::fprintf(out, "%6s %6s | %19s | %19s | %11s | %23s | %23s\n", "", "",
               "ferry (us)", "raw (us)", "ferry/raw", "rt bw (MB/s)",
               "stream bw (MB/s)");
  for (const SizeResult& r : s.sizes) {
    const ImplResult& f = r.ferry;
    const ImplResult& w = r.raw;
    std::fprintf(out,
                 "%6s %6u | %9.2f %9.2f | %9.2f %9.2f | %5.2f %5.2f | %8.1f "
                 "%8.1f %5.2f |",
                 FormatSize(r.plan.size).c_str(), r.plan.iters,
                 f.rtt_ns.median / 1e3, f.rtt_ns.p99 / 1e3,
                 w.rtt_ns.median / 1e3, w.rtt_ns.p99 / 1e3,
                 Ratio(f.rtt_ns.median, w.rtt_ns.median),
                 Ratio(f.rtt_ns.p99, w.rtt_ns.p99), f.bw_rtt_Bps / 1e6,
                 w.bw_rtt_Bps / 1e6, Ratio(f.bw_rtt_Bps, w.bw_rtt_Bps));
    if (r.plan.stream_messages > 0) {
      std::fprintf(out, " %8.1f %8.1f %5.2f\n", f.stream_Bps.median / 1e6,
                   w.stream_Bps.median / 1e6,
                   Ratio(f.stream_Bps.median, w.stream_Bps.median));
    } else {
      std::fprintf(out, " %8s %8s %5s\n", "-", "-", "-");
    }
  }
  std::fprintf(out,
               "per round trip (client): ferry progress() calls / poll() "
               "sleeps / user+sys CPU us vs raw send+recv calls / poll() "
               "sleeps / user+sys CPU us\n");
  for (const SizeResult& r : s.sizes) {
    std::fprintf(out,
                 "%6s  ferry %7.1f calls %5.2f sleeps %7.2f+%-7.2f us | raw "
                 "%7.1f calls %5.2f sleeps %7.2f+%-7.2f us\n",
                 FormatSize(r.plan.size).c_str(), r.ferry.calls_per_rt,
                 r.ferry.waits_per_rt, r.ferry.user_ns_per_rt / 1e3,
                 r.ferry.sys_ns_per_rt / 1e3, r.raw.calls_per_rt,
                 r.raw.waits_per_rt, r.raw.user_ns_per_rt / 1e3,
                 r.raw.sys_ns_per_rt / 1e3);
  }
  std::fflush(out);
}

Status WriteJson(const std::string& path, const RunInfo& run,
                 const std::vector<SuiteResult>& suites) {
  const MachineInfo& m = run.machine;
  const Options& o = run.options;
  Json j;
  j.Open('{');
  j.Key("benchmark"); j.Str("ferry-bench-transport");
  j.Key("schema_version"); j.Int(1);
  j.Key("command"); j.Str(run.command);
  j.Key("date_utc"); j.Str(m.date_utc);
  j.Key("machine"); j.Open('{');
  j.Key("nproc"); j.Int(static_cast<uint64_t>(m.nproc));
  j.Key("cpu_model"); j.Str(m.cpu_model);
  j.Key("kernel"); j.Str(m.kernel);
  j.Key("arch"); j.Str(m.arch);
  j.Key("hostname"); j.Str(m.hostname);
  j.Key("mem_total_bytes"); j.Int(m.mem_total_bytes);
  j.Close('}');
  j.Key("build"); j.Open('{');
  j.Key("compiler"); j.Str(m.compiler);
  j.Key("build_type"); j.Str(m.build_type);
  j.Close('}');
  j.Key("plugin"); j.Open('{');
  j.Key("name"); j.Str(run.plugin_name);
  j.Key("version"); j.Str(run.plugin_version);
  j.Key("path"); j.Str(run.plugin_path);
  j.Key("abi"); j.Str(std::to_string(run.abi_major) + "." +
                      std::to_string(run.abi_minor));
  j.Close('}');
  j.Key("cpus"); j.Open('{');
  j.Key("pinned"); j.Bool(run.pinned);
  j.Key("self"); j.Int(static_cast<uint64_t>(o.cpu_self));
  j.Key("peer"); j.Int(static_cast<uint64_t>(o.cpu_peer));
  j.Close('}');
  j.Key("method"); j.Open('{');
  j.Key("latency");
  j.Str("round trip: client sends size bytes (16-byte header + one "
            "segment for ferry, bare bytes for raw), peer echoes size bytes "
            "back; each timed alone with steady_clock; median and "
            "nearest-rank p99");
  j.Key("bw_rtt"); j.Str("2 * size / median round trip (bytes/s)");
  j.Key("bw_stream");
  j.Str("bytes/s of one-way bursts: ferry keeps `window` sends in flight "
            "and the peer places into a ring of `window` buffers; raw writes "
            "back to back; the peer acks the burst's end; median over "
            "`stream_reps` bursts after one untimed burst");
  j.Key("raw_floor");
  j.Str("plain TCP on 127.0.0.1, non-blocking, TCP_NODELAY, default "
            "socket buffers, no framing, same buffers and same polling mode");
  j.Key("window"); j.Int(o.window);
  j.Key("stream_reps"); j.Int(o.stream_reps);
  j.Key("stream_min"); j.Int(o.stream_min);
  j.Key("budget_bytes"); j.Int(o.budget);
  j.Key("iters_cap"); j.Int(o.iters);
  j.Key("rounds"); j.Int(o.rounds);
  if (!o.only.empty()) {
    j.Key("only");
    j.Str(o.only);
  }
  j.Close('}');
  j.Key("suites"); j.Open('[');
  for (const SuiteResult& s : suites) {
    j.Open('{');
    j.Key("mode"); j.Str(PollModeName(s.mode));
    j.Key("mode_description"); j.Str(ModeText(s.mode));
    j.Key("seconds"); j.Num(s.seconds);
    j.Key("loadavg_before"); LoadJson(j, s.loadavg_before);
    j.Key("loadavg_after"); LoadJson(j, s.loadavg_after);
    j.Key("ferry_context"); j.Open('{');
    j.Key("description"); j.Str(s.description);
    j.Key("caps"); j.Open('[');
    for (const std::string& c : CapabilityNames(s.caps)) j.Str(c);
    j.Close(']');
    j.Key("wakeup_fd"); j.Bool(s.wakeup_fd);
    j.Key("registered_buffers"); j.Bool(s.registered);
    j.Key("max_inline_size"); j.Int(s.max_inline_size);
    j.Close('}');
    j.Key("results"); j.Open('[');
    for (const SizeResult& r : s.sizes) {
      const bool streamed = r.plan.stream_messages > 0;
      j.Open('{');
      j.Key("size"); j.Int(r.plan.size);
      j.Key("iters"); j.Int(r.plan.iters);
      j.Key("warmup_per_round"); j.Int(r.plan.warmup);
      j.Key("rounds"); j.Int(r.plan.rounds);
      if (streamed) {
        j.Key("stream_messages"); j.Int(r.plan.stream_messages);
        j.Key("stream_reps"); j.Int(r.plan.stream_reps);
      }
      j.Key("ferry"); ImplJson(j, r.ferry, streamed);
      j.Key("raw"); ImplJson(j, r.raw, streamed);
      j.Key("ratio"); j.Open('{');
      j.Key("rtt_median"); j.Num(Ratio(r.ferry.rtt_ns.median, r.raw.rtt_ns.median));
      j.Key("rtt_p99"); j.Num(Ratio(r.ferry.rtt_ns.p99, r.raw.rtt_ns.p99));
      j.Key("bw_rtt"); j.Num(Ratio(r.ferry.bw_rtt_Bps, r.raw.bw_rtt_Bps));
      if (streamed) {
        j.Key("bw_stream");
        j.Num(Ratio(r.ferry.stream_Bps.median, r.raw.stream_Bps.median));
      }
      j.Close('}');
      j.Close('}');
    }
    j.Close(']');
    j.Close('}');
  }
  j.Close(']');
  j.Close('}');
  std::ofstream f(path, std::ios::trunc);
  f << j.str() << "\n";
  f.close();
  if (!f) {
    return Status(FERRY_UNKNOWN, "cannot write --json file '" + path +
                                     "': " + std::strerror(errno));
  }
  return Status();
}

}  // namespace ferry::bench
