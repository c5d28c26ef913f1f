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
  j.Key("bw_rtt_mean_Bps"); j.Num(r.bw_rtt_mean_Bps);
  if (streamed) {
    j.Key("stream_Bps");
    SummaryJson(j, r.stream_Bps);
  }
  j.Key("calls_per_rt"); j.Num(r.calls_per_rt);
  j.Key("waits_per_rt"); j.Num(r.waits_per_rt);
  j.Key("user_cpu_ns_per_rt"); j.Num(r.user_ns_per_rt);
  j.Key("sys_cpu_ns_per_rt"); j.Num(r.sys_ns_per_rt);
  if (!r.method.empty()) {
    j.Key("method"); j.Str(r.method);
  }
  if (!r.note.empty()) {
    j.Key("note"); j.Str(r.note);
  }
  j.Close('}');
}

void LoadJson(Json& j, const std::array<double, 3>& l) {
  j.Open('[');
  for (double v : l) j.Num(v);
  j.Close(']');
}

const char* ModeText(PollMode mode) {
  return mode == PollMode::kBusy
             ? "busy: ferry spins on progress(), raw TCP on non-blocking "
               "recv()/send(), raw libfabric and fi_pingpong on fi_cq_read()"
             : "sleep: ferry poll()s the wakeup fd when progress() has "
               "nothing (backs off without one), raw TCP poll()s the socket "
               "on EAGAIN, raw libfabric the CQ's wait fd (backs off without "
               "one)";
}

// ferry / reference. Latency: below 1 means ferry is faster; bandwidth:
// above 1 means ferry moves more.
struct Ratios {
  double rtt_median, rtt_p99, rtt_mean, bw_rtt, bw_rtt_mean, bw_stream;
};

Ratios RatiosOf(const ImplResult& f, const ImplResult& r) {
  return {Ratio(f.rtt_ns.median, r.rtt_ns.median),
          Ratio(f.rtt_ns.p99, r.rtt_ns.p99),
          Ratio(f.rtt_ns.mean, r.rtt_ns.mean),
          Ratio(f.bw_rtt_Bps, r.bw_rtt_Bps),
          Ratio(f.bw_rtt_mean_Bps, r.bw_rtt_mean_Bps),
          Ratio(f.stream_Bps.median, r.stream_Bps.median)};
}

// "  12.34" or "      -" for a figure that does not exist.
std::string Fixed(double v, int width, int decimals) {
  char buf[64];
  if (std::isfinite(v) && v > 0) {
    std::snprintf(buf, sizeof buf, "%*.*f", width, decimals, v);
  } else {
    std::snprintf(buf, sizeof buf, "%*s", width, "-");
  }
  return buf;
}

void PrintCounters(std::FILE* out, const char* label, const ImplResult& r) {
  std::fprintf(out, " | %s %7.1f calls %5.2f sleeps %7.2f+%-7.2f us", label,
               r.calls_per_rt, r.waits_per_rt, r.user_ns_per_rt / 1e3,
               r.sys_ns_per_rt / 1e3);
}

}  // namespace

void PrintHeader(std::FILE* out, const RunInfo& run) {
  const MachineInfo& m = run.machine;
  std::string refs;
  for (const std::string& r : run.options.references) {
    refs += (refs.empty() ? "" : ", ") + r;
  }
  std::fprintf(out, "ferry-bench-transport: %s %s (%s, ABI %u.%u) vs %s\n",
               run.plugin_name.c_str(), run.plugin_version.c_str(),
               run.plugin_path.c_str(), run.abi_major, run.abi_minor,
               refs.empty() ? "no reference" : refs.c_str());
  if (!run.options.fabric_provider.empty()) {
    std::fprintf(out, "libfabric provider: %s\n",
                 run.options.fabric_provider.c_str());
  }
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
  for (size_t k = 0; k < s.references.size(); ++k) {
    std::fprintf(out, "reference %s: %s\n", s.references[k].label.c_str(),
                 s.reference_details[k].empty()
                     ? s.references[k].description.c_str()
                     : s.reference_details[k].c_str());
  }
  std::fprintf(out,
               "load average before/after: %.2f / %.2f (1 min); %.1f s\n",
               s.loadavg_before[0], s.loadavg_after[0], s.seconds);
  std::fprintf(out,
               "round trip (us): median, p99 and mean of n timed round trips "
               "(implementations rotating in %u rounds);\n"
               "rt bw = 2*size/median round trip (mean: 2*size/mean); "
               "stream bw = median of %u bursts with %u messages in flight "
               "(raw TCP: back-to-back writes); MB/s = 1e6 B/s\n",
               run.options.rounds, run.options.stream_reps,
               run.options.window);
  std::fprintf(out, "\nferry\n%6s %6s | %9s %9s %9s | %8s %8s | %8s\n",
               "size", "n", "median", "p99", "mean", "rt bw", "(mean)",
               "stream");
  for (const SizeResult& r : s.sizes) {
    const ImplResult& f = r.ferry;
    std::fprintf(out, "%6s %6u | %s %s %s | %s %s | %s\n",
                 FormatSize(r.plan.size).c_str(), r.plan.iters,
                 Fixed(f.rtt_ns.median / 1e3, 9, 2).c_str(),
                 Fixed(f.rtt_ns.p99 / 1e3, 9, 2).c_str(),
                 Fixed(f.rtt_ns.mean / 1e3, 9, 2).c_str(),
                 Fixed(f.bw_rtt_Bps / 1e6, 8, 1).c_str(),
                 Fixed(f.bw_rtt_mean_Bps / 1e6, 8, 1).c_str(),
                 Fixed(f.stream_Bps.median / 1e6, 8, 1).c_str());
  }
  for (size_t k = 0; k < s.references.size(); ++k) {
    const ReferenceInfo& ref = s.references[k];
    std::fprintf(out,
                 "\n%s; ratios ferry/%s (latency below 1: ferry faster; "
                 "bandwidth above 1: ferry faster)%s\n",
                 ref.label.c_str(), ref.id.c_str(),
                 ref.batch ? "; it reports means only" : "");
    std::fprintf(out,
                 "%6s %6s | %9s %9s %9s | %8s %8s | %8s | %6s %6s %6s | %6s "
                 "%6s %6s\n",
                 "size", "n", "median", "p99", "mean", "rt bw", "(mean)",
                 "stream", "lat", "p99", "mean", "rt bw", "(mean)", "stream");
    for (const SizeResult& r : s.sizes) {
      const ImplResult& w = r.refs[k];
      const Ratios x = RatiosOf(r.ferry, w);
      std::fprintf(out, "%6s %6u | %s %s %s | %s %s | %s | %s %s %s | %s %s %s\n",
                   FormatSize(r.plan.size).c_str(), r.plan.iters,
                   Fixed(w.rtt_ns.median / 1e3, 9, 2).c_str(),
                   Fixed(w.rtt_ns.p99 / 1e3, 9, 2).c_str(),
                   Fixed(w.rtt_ns.mean / 1e3, 9, 2).c_str(),
                   Fixed(w.bw_rtt_Bps / 1e6, 8, 1).c_str(),
                   Fixed(w.bw_rtt_mean_Bps / 1e6, 8, 1).c_str(),
                   Fixed(w.stream_Bps.median / 1e6, 8, 1).c_str(),
                   Fixed(x.rtt_median, 6, 2).c_str(),
                   Fixed(x.rtt_p99, 6, 2).c_str(),
                   Fixed(x.rtt_mean, 6, 2).c_str(),
                   Fixed(x.bw_rtt, 6, 2).c_str(),
                   Fixed(x.bw_rtt_mean, 6, 2).c_str(),
                   Fixed(x.bw_stream, 6, 2).c_str());
    }
  }
  std::fprintf(out,
               "\nper round trip (client): progress() or send/recv or "
               "fi_cq_read calls / poll() or back-off sleeps / user+sys CPU "
               "us\n");
  for (const SizeResult& r : s.sizes) {
    std::fprintf(out, "%6s", FormatSize(r.plan.size).c_str());
    PrintCounters(out, "ferry", r.ferry);
    for (size_t k = 0; k < s.references.size(); ++k) {
      if (!s.references[k].batch) {
        PrintCounters(out, s.references[k].id.c_str(), r.refs[k]);
      }
    }
    std::fprintf(out, "\n");
  }
  std::fflush(out);
}

void PrintRatioSummary(std::FILE* out, const ReferenceInfo& ref,
                       const SizeResult& small, const SizeResult& large,
                       size_t k) {
  const Ratios a = RatiosOf(small.ferry, small.refs[k]);
  const Ratios b = RatiosOf(large.ferry, large.refs[k]);
  if (ref.batch) {
    std::fprintf(out, "%s round trip mean %.2fx; %s bandwidth (means) %.2fx",
                 FormatSize(small.plan.size).c_str(), a.rtt_mean,
                 FormatSize(large.plan.size).c_str(), b.bw_rtt_mean);
    return;
  }
  std::fprintf(out,
               "%s round trip median %.2fx (p99 %.2fx); %s bandwidth from "
               "round trip %.2fx",
               FormatSize(small.plan.size).c_str(), a.rtt_median, a.rtt_p99,
               FormatSize(large.plan.size).c_str(), b.bw_rtt);
  if (large.plan.stream_messages > 0) {
    std::fprintf(out, ", streaming %.2fx", b.bw_stream);
  }
}

Status WriteJson(const std::string& path, const RunInfo& run,
                 const std::vector<SuiteResult>& suites) {
  const MachineInfo& m = run.machine;
  const Options& o = run.options;
  Json j;
  j.Open('{');
  j.Key("benchmark"); j.Str("ferry-bench-transport");
  // 2: references by id ("references", "ratios") instead of "raw"/"ratio".
  j.Key("schema_version"); j.Int(2);
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
  j.Key("ratios");
  j.Str("ferry / reference: latency below 1 means ferry is faster, "
            "bandwidth above 1 means ferry is faster; batch references have "
            "means only (rtt_mean, bw_rtt_mean)");
  if (!o.fabric_provider.empty()) {
    j.Key("fabric_provider");
    j.Str(o.fabric_provider);
  }
  if (!o.references.empty()) {
    j.Key("raw_fabric_path");
    j.Str(o.raw_fabric_path);
  }
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
    j.Key("references"); j.Open('[');
    for (size_t k = 0; k < s.references.size(); ++k) {
      const ReferenceInfo& ref = s.references[k];
      j.Open('{');
      j.Key("id"); j.Str(ref.id);
      j.Key("label"); j.Str(ref.label);
      j.Key("description"); j.Str(ref.description);
      j.Key("detail"); j.Str(s.reference_details[k]);
      j.Key("batch"); j.Bool(ref.batch);
      j.Close('}');
    }
    j.Close(']');
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
      j.Key("references"); j.Open('{');
      for (size_t k = 0; k < s.references.size(); ++k) {
        j.Key(s.references[k].id);
        ImplJson(j, r.refs[k], streamed && !s.references[k].batch);
      }
      j.Close('}');
      j.Key("ratios"); j.Open('{');
      for (size_t k = 0; k < s.references.size(); ++k) {
        const Ratios x = RatiosOf(r.ferry, r.refs[k]);
        j.Key(s.references[k].id); j.Open('{');
        j.Key("rtt_median"); j.Num(x.rtt_median);
        j.Key("rtt_p99"); j.Num(x.rtt_p99);
        j.Key("rtt_mean"); j.Num(x.rtt_mean);
        j.Key("bw_rtt"); j.Num(x.bw_rtt);
        j.Key("bw_rtt_mean"); j.Num(x.bw_rtt_mean);
        if (streamed && !s.references[k].batch) {
          j.Key("bw_stream"); j.Num(x.bw_stream);
        }
        j.Close('}');
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
