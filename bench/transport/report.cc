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
  j.Key("count");
  j.Int(s.count);
  j.Key("min");
  j.Num(s.min);
  j.Key("median");
  j.Num(s.median);
  j.Key("p90");
  j.Num(s.p90);
  j.Key("p99");
  j.Num(s.p99);
  j.Key("max");
  j.Num(s.max);
  j.Key("mean");
  j.Num(s.mean);
  j.Close('}');
}

void ImplJson(Json& j, const ImplResult& r, bool streamed) {
  j.Open('{');
  j.Key("rtt_ns");
  SummaryJson(j, r.rtt_ns);
  j.Key("bw_rtt_Bps");
  j.Num(r.bw_rtt_Bps);
  j.Key("bw_rtt_mean_Bps");
  j.Num(r.bw_rtt_mean_Bps);
  j.Key("loop_rtt_ns");
  j.Num(r.loop_rtt_ns);
  j.Key("bw_loop_Bps");
  j.Num(r.bw_loop_Bps);
  if (streamed) {
    j.Key("stream_Bps");
    SummaryJson(j, r.stream_Bps);
  }
  j.Key("calls_per_rt");
  j.Num(r.calls_per_rt);
  j.Key("waits_per_rt");
  j.Num(r.waits_per_rt);
  j.Key("user_cpu_ns_per_rt");
  j.Num(r.user_ns_per_rt);
  j.Key("sys_cpu_ns_per_rt");
  j.Num(r.sys_ns_per_rt);
  if (!r.method.empty()) {
    j.Key("method");
    j.Str(r.method);
  }
  if (!r.note.empty()) {
    j.Key("note");
    j.Str(r.note);
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
             ? "busy: ferry spins on progress(); every reference spins on "
               "its own wait (raw TCP: non-blocking recv()/send(); raw shm: "
               "the ring index; raw libfabric and fi_pingpong: fi_cq_read(); "
               "TensorPipe: sched_yield() until its "
               "callback ran)"
             : "sleep: ferry poll()s the wakeup fd when progress() has "
               "nothing (plugins that spin before sleeping are told not to: "
               "spin_us=0); every reference blocks when it has nothing to do "
               "(raw TCP: poll() on EAGAIN; raw shm: futex; raw libfabric: "
               "the CQ's wait fd after fi_trywait, or back-off without one; "
               "fi_pingpong is not measured: it only spins; TensorPipe: a "
               "condition variable, while its shm reactor thread still spins)";
}

// The run's suites, pass by pass, summed up for the suite-level fields.
double Seconds(const SuiteResult& s) {
  double total = 0;
  for (const PassResult& p : s.passes) total += p.seconds;
  return total;
}

std::array<double, 3> LoadBefore(const SuiteResult& s) {
  return s.passes.empty() ? std::array<double, 3>{} : s.passes.front().loadavg_before;
}

std::array<double, 3> LoadAfter(const SuiteResult& s) {
  return s.passes.empty() ? std::array<double, 3>{} : s.passes.back().loadavg_after;
}

// Column labels are cut to fit the table.
std::string Cut(const std::string& s, size_t width) {
  return s.size() <= width ? s : s.substr(0, width);
}

}  // namespace

void PrintHeader(std::FILE* out, const RunInfo& run) {
  const MachineInfo& m = run.machine;
  std::string against;
  for (const ReferenceInfo& r : run.references) {
    against += (against.empty() ? "" : ", ") + r.label;
  }
  std::fprintf(out, "ferry-bench-transport: %s %s (%s, ABI %u.%u) vs %s\n",
               run.plugin_name.c_str(), run.plugin_version.c_str(),
               run.plugin_path.c_str(), run.abi_major, run.abi_minor, against.c_str());
  for (const SkippedReference& s : run.skipped) {
    std::fprintf(out, "not measured: %s (%s)\n", s.info.label.c_str(), s.reason.c_str());
  }
  std::fprintf(out, "machine: %ld CPUs, %s, %s\n", m.nproc, m.cpu_model.c_str(),
               m.kernel.c_str());
  if (run.pinned) {
    std::fprintf(out, "pinning: this process on CPU %d, peer on CPU %d\n",
                 run.options.cpu_self, run.options.cpu_peer);
  } else {
    std::fprintf(out, "pinning: none (figures are noisier)\n");
  }
  std::fprintf(out, "date: %s\n", m.date_utc.c_str());
}

void PrintSuite(std::FILE* out, const RunInfo& run, const SuiteResult& s) {
  const size_t n_refs = run.references.size();
  std::fprintf(out, "\n== mode %s ==\n", PollModeName(s.mode));
  std::fprintf(out, "%s\n", ModeText(s.mode));
  std::fprintf(out, "ferry context: %s%s%s\n", s.description.c_str(),
               s.wakeup_fd ? "; wakeup fd" : "; no wakeup fd",
               s.registered ? "; buffers registered" : "");
  for (const PassResult& p : s.passes) {
    std::fprintf(out,
                 "pass %-16s load average before/after: %.2f / %.2f (1 min); "
                 "%.1f s\n",
                 p.label.c_str(), p.loadavg_before[0], p.loadavg_after[0], p.seconds);
  }
  std::fprintf(
      out,
      "round trip (us): median and p99 of n timed round trips "
      "(implementations taking turns in rounds, 4 to 20 per size: see the JSON); "
      "ratio = ferry / reference; 'm': a batch reference's mean "
      "(fi_pingpong, which times its whole loop), its ratio ferry's "
      "loop mean (as many round trips again, timed as one loop) / "
      "that mean\n");
  std::fprintf(out, "%6s %6s | %19s", "", "", "ferry (us)");
  for (const ReferenceInfo& r : run.references) {
    std::fprintf(out, " | %-31s", Cut(r.label + " (us), ratio", 31).c_str());
  }
  std::fprintf(out, "\n%6s %6s | %9s %9s", "size", "n", "median", "p99");
  for (size_t k = 0; k < n_refs; ++k) {
    std::fprintf(out, " | %9s %9s %5s %5s", "median", "p99", "med", "p99");
  }
  std::fprintf(out, "\n");
  for (const SizeResult& r : s.sizes) {
    const ImplResult& f = r.ferry;
    std::fprintf(out, "%6s %6u | %9.2f %9.2f", FormatSize(r.plan.size).c_str(),
                 r.plan.iters, f.rtt_ns.median / 1e3, f.rtt_ns.p99 / 1e3);
    for (size_t k = 0; k < n_refs; ++k) {
      const ImplResult& w = r.references[k];
      if (run.references[k].batch) {  // a loop mean, compared with ferry's
        if (!(w.loop_rtt_ns > 0)) {   // not measured in this mode
          std::fprintf(out, " | %9s %9s %5s %5s", "-", "-", "-", "-");
          continue;
        }
        std::fprintf(out, " | %8.2fm %9s %5.2f %5s", w.loop_rtt_ns / 1e3, "-",
                     Ratio(f.loop_rtt_ns, w.loop_rtt_ns), "-");
        continue;
      }
      std::fprintf(out, " | %9.2f %9.2f %5.2f %5.2f", w.rtt_ns.median / 1e3,
                   w.rtt_ns.p99 / 1e3, Ratio(f.rtt_ns.median, w.rtt_ns.median),
                   Ratio(f.rtt_ns.p99, w.rtt_ns.p99));
    }
    std::fprintf(out, "\n");
  }

  std::fprintf(out,
               "bandwidth (MB/s = 1e6 B/s): rt = 2*size/median round trip; "
               "st = median of %u bursts with %u messages in flight (raw "
               "floors: back-to-back writes); ratio = ferry / reference\n",
               run.options.stream_reps, run.options.window);
  std::fprintf(out, "%6s | %8s", "size", "ferry rt");
  for (const ReferenceInfo& r : run.references) {
    std::fprintf(out, " | %8s %5s", Cut(r.label, 8).c_str(), "ratio");
  }
  std::fprintf(out, " || %8s", "ferry st");
  for (const ReferenceInfo& r : run.references) {
    std::fprintf(out, " | %8s %5s", Cut(r.label, 8).c_str(), "ratio");
  }
  std::fprintf(out, "\n");
  for (const SizeResult& r : s.sizes) {
    const ImplResult& f = r.ferry;
    std::fprintf(out, "%6s | %8.1f", FormatSize(r.plan.size).c_str(), f.bw_rtt_Bps / 1e6);
    for (size_t k = 0; k < n_refs; ++k) {
      const ImplResult& w = r.references[k];
      if (run.references[k].batch) {  // from loop means on both sides
        if (!(w.bw_loop_Bps > 0)) {
          std::fprintf(out, " | %8s %5s", "-", "-");
          continue;
        }
        std::fprintf(out, " | %7.1fm %5.2f", w.bw_loop_Bps / 1e6,
                     Ratio(f.bw_loop_Bps, w.bw_loop_Bps));
        continue;
      }
      std::fprintf(out, " | %8.1f %5.2f", w.bw_rtt_Bps / 1e6,
                   Ratio(f.bw_rtt_Bps, w.bw_rtt_Bps));
    }
    if (r.plan.stream_messages > 0) {
      std::fprintf(out, " || %8.1f", f.stream_Bps.median / 1e6);
      for (size_t k = 0; k < n_refs; ++k) {
        const ImplResult& w = r.references[k];
        if (run.references[k].batch) {  // does not stream
          std::fprintf(out, " | %8s %5s", "-", "-");
          continue;
        }
        std::fprintf(out, " | %8.1f %5.2f", w.stream_Bps.median / 1e6,
                     Ratio(f.stream_Bps.median, w.stream_Bps.median));
      }
    } else {
      std::fprintf(out, " || %8s", "-");
      for (size_t k = 0; k < n_refs; ++k) {
        std::fprintf(out, " | %8s %5s", "-", "-");
      }
    }
    std::fprintf(out, "\n");
  }

  std::fprintf(out,
               "per round trip (client): loop calls (ferry: progress(); raw "
               "TCP: send/recv; raw shm: ring copies; TensorPipe: "
               "sched_yield) / blocking sleeps / user+sys CPU us\n");
  for (const SizeResult& r : s.sizes) {
    std::fprintf(out, "%6s  ferry %7.1f %5.2f %6.2f+%-6.2f",
                 FormatSize(r.plan.size).c_str(), r.ferry.calls_per_rt,
                 r.ferry.waits_per_rt, r.ferry.user_ns_per_rt / 1e3,
                 r.ferry.sys_ns_per_rt / 1e3);
    for (size_t k = 0; k < n_refs; ++k) {
      const ImplResult& w = r.references[k];
      std::fprintf(out, " | %s %7.1f %5.2f %6.2f+%-6.2f", run.references[k].key.c_str(),
                   w.calls_per_rt, w.waits_per_rt, w.user_ns_per_rt / 1e3,
                   w.sys_ns_per_rt / 1e3);
    }
    std::fprintf(out, "\n");
  }
  std::fflush(out);
}

void PrintSummary(std::FILE* out, const RunInfo& run,
                  const std::vector<SuiteResult>& suites) {
  std::fprintf(out,
               "\nsummary, ferry / reference (latency: lower is "
               "better; bandwidth: higher is better):\n");
  for (const SuiteResult& s : suites) {
    if (s.sizes.empty()) continue;
    const SizeResult& small = s.sizes.front();
    const SizeResult& large = s.sizes.back();
    for (size_t k = 0; k < run.references.size(); ++k) {
      const ImplResult& ws = small.references[k];
      const ImplResult& wl = large.references[k];
      if (run.references[k].batch) {
        if (s.mode != PollMode::kBusy) continue;  // measured in busy only
        std::fprintf(out,
                     "  %-5s vs %-15s %s round trip loop mean %.2fx (ferry "
                     "%.2f us; timed one by one, its mean %.2f us: %.2fx); %s "
                     "bandwidth (loop means) %.2fx\n",
                     PollModeName(s.mode), run.references[k].label.c_str(),
                     FormatSize(small.plan.size).c_str(),
                     Ratio(small.ferry.loop_rtt_ns, ws.loop_rtt_ns),
                     small.ferry.loop_rtt_ns / 1e3, small.ferry.rtt_ns.mean / 1e3,
                     Ratio(small.ferry.rtt_ns.mean, ws.loop_rtt_ns),
                     FormatSize(large.plan.size).c_str(),
                     Ratio(large.ferry.bw_loop_Bps, wl.bw_loop_Bps));
        continue;
      }
      std::fprintf(out,
                   "  %-5s vs %-15s %s round trip median %.2fx (p99 %.2fx); "
                   "%s bandwidth from round trip %.2fx",
                   PollModeName(s.mode), run.references[k].label.c_str(),
                   FormatSize(small.plan.size).c_str(),
                   Ratio(small.ferry.rtt_ns.median, ws.rtt_ns.median),
                   Ratio(small.ferry.rtt_ns.p99, ws.rtt_ns.p99),
                   FormatSize(large.plan.size).c_str(),
                   Ratio(large.ferry.bw_rtt_Bps, wl.bw_rtt_Bps));
      if (large.plan.stream_messages > 0) {
        std::fprintf(out, ", streaming %.2fx",
                     Ratio(large.ferry.stream_Bps.median, wl.stream_Bps.median));
      }
      std::fprintf(out, "\n");
    }
  }
  for (const SkippedReference& sk : run.skipped) {
    std::fprintf(out, "  not measured: %s (%s)\n", sk.info.label.c_str(),
                 sk.reason.c_str());
  }
}

namespace {

void RatioJson(Json& j, const ImplResult& f, const ImplResult& w, bool streamed) {
  j.Open('{');
  j.Key("rtt_median");
  j.Num(Ratio(f.rtt_ns.median, w.rtt_ns.median));
  j.Key("rtt_p99");
  j.Num(Ratio(f.rtt_ns.p99, w.rtt_ns.p99));
  j.Key("bw_rtt");
  j.Num(Ratio(f.bw_rtt_Bps, w.bw_rtt_Bps));
  j.Key("rtt_mean");
  j.Num(Ratio(f.rtt_ns.mean, w.rtt_ns.mean));
  j.Key("bw_rtt_mean");
  j.Num(Ratio(f.bw_rtt_mean_Bps, w.bw_rtt_mean_Bps));
  // Loop means: the basis of comparison with a batch reference (fi_pingpong).
  j.Key("rtt_loop_mean");
  j.Num(Ratio(f.loop_rtt_ns, w.loop_rtt_ns));
  j.Key("bw_loop_mean");
  j.Num(Ratio(f.bw_loop_Bps, w.bw_loop_Bps));
  if (streamed) {
    j.Key("bw_stream");
    j.Num(Ratio(f.stream_Bps.median, w.stream_Bps.median));
  }
  j.Close('}');
}

void ReferenceJson(Json& j, const ReferenceInfo& r, const std::string* skip) {
  j.Open('{');
  j.Key("key");
  j.Str(r.key);
  j.Key("label");
  j.Str(r.label);
  j.Key("measured");
  j.Bool(skip == nullptr);
  if (skip != nullptr) {
    j.Key("skipped_because");
    j.Str(*skip);
  } else {
    j.Key("method");
    j.Str(r.method);
    j.Key("own_pass");
    j.Bool(r.isolated);
    // Times itself: means only (rtt_ns.mean = loop_rtt_ns, bw_loop_Bps),
    // busy mode; compared by loop means (ratio rtt_loop_mean, bw_loop_mean).
    j.Key("batch");
    j.Bool(r.batch);
  }
  j.Close('}');
}

}  // namespace

Status WriteJson(const std::string& path, const RunInfo& run,
                 const std::vector<SuiteResult>& suites) {
  const MachineInfo& m = run.machine;
  const Options& o = run.options;
  Json j;
  j.Open('{');
  j.Key("benchmark");
  j.Str("ferry-bench-transport");
  // 2: any number of references, each result keyed by reference and
  // "ratio" keyed by reference too (1 had "raw" and a flat "ratio").
  j.Key("schema_version");
  j.Int(2);
  j.Key("command");
  j.Str(run.command);
  j.Key("date_utc");
  j.Str(m.date_utc);
  j.Key("machine");
  j.Open('{');
  j.Key("nproc");
  j.Int(static_cast<uint64_t>(m.nproc));
  j.Key("cpu_model");
  j.Str(m.cpu_model);
  j.Key("kernel");
  j.Str(m.kernel);
  j.Key("arch");
  j.Str(m.arch);
  j.Key("hostname");
  j.Str(m.hostname);
  j.Key("mem_total_bytes");
  j.Int(m.mem_total_bytes);
  j.Close('}');
  j.Key("build");
  j.Open('{');
  j.Key("compiler");
  j.Str(m.compiler);
  j.Key("build_type");
  j.Str(m.build_type);
  j.Close('}');
  j.Key("plugin");
  j.Open('{');
  j.Key("name");
  j.Str(run.plugin_name);
  j.Key("version");
  j.Str(run.plugin_version);
  j.Key("path");
  j.Str(run.plugin_path);
  j.Key("abi");
  j.Str(std::to_string(run.abi_major) + "." + std::to_string(run.abi_minor));
  j.Close('}');
  j.Key("references");
  j.Open('[');
  for (const ReferenceInfo& r : run.references) ReferenceJson(j, r, nullptr);
  for (const SkippedReference& s : run.skipped) {
    ReferenceJson(j, s.info, &s.reason);
  }
  j.Close(']');
  j.Key("cpus");
  j.Open('{');
  j.Key("pinned");
  j.Bool(run.pinned);
  j.Key("self");
  j.Int(static_cast<uint64_t>(o.cpu_self));
  j.Key("peer");
  j.Int(static_cast<uint64_t>(o.cpu_peer));
  j.Close('}');
  j.Key("method");
  j.Open('{');
  j.Key("latency");
  j.Str(
      "round trip: client sends size bytes (ferry: 16-byte header + one "
      "segment; each reference: see its method), peer echoes size bytes "
      "back; each timed alone with steady_clock; median and "
      "nearest-rank p99");
  j.Key("bw_rtt");
  j.Str("2 * size / median round trip (bytes/s)");
  j.Key("bw_stream");
  j.Str(
      "bytes/s of one-way bursts: ferry keeps `window` sends in flight "
      "and the peer places into a ring of `window` buffers; raw floors "
      "write back to back; the peer acks the burst's end; median over "
      "`stream_reps` bursts after one untimed burst");
  j.Key("passes");
  j.Str(
      "ferry and the references that can share the machine take turns "
      "within each size; a reference with its own pass (own_pass) is "
      "measured over the whole plan after them");
  j.Key("window");
  j.Int(o.window);
  j.Key("stream_reps");
  j.Int(o.stream_reps);
  j.Key("stream_min");
  j.Int(o.stream_min);
  j.Key("budget_bytes");
  j.Int(o.budget);
  j.Key("iters_cap");
  j.Int(o.iters);
  j.Key("rounds");
  if (o.rounds != 0) {
    j.Int(o.rounds);
  } else {
    j.Str("per size: iters / 500, from 4 to 20 (each result's rounds)");
  }
  if (!o.only.empty()) {
    j.Key("only");
    j.Str(o.only);
  }
  j.Close('}');
  j.Key("suites");
  j.Open('[');
  for (const SuiteResult& s : suites) {
    j.Open('{');
    j.Key("mode");
    j.Str(PollModeName(s.mode));
    j.Key("mode_description");
    j.Str(ModeText(s.mode));
    j.Key("seconds");
    j.Num(Seconds(s));
    j.Key("loadavg_before");
    LoadJson(j, LoadBefore(s));
    j.Key("loadavg_after");
    LoadJson(j, LoadAfter(s));
    j.Key("passes");
    j.Open('[');
    for (const PassResult& p : s.passes) {
      j.Open('{');
      j.Key("measures");
      j.Str(p.label);
      j.Key("seconds");
      j.Num(p.seconds);
      j.Key("loadavg_before");
      LoadJson(j, p.loadavg_before);
      j.Key("loadavg_after");
      LoadJson(j, p.loadavg_after);
      j.Close('}');
    }
    j.Close(']');
    j.Key("ferry_context");
    j.Open('{');
    j.Key("description");
    j.Str(s.description);
    j.Key("caps");
    j.Open('[');
    for (const std::string& c : CapabilityNames(s.caps)) j.Str(c);
    j.Close(']');
    j.Key("wakeup_fd");
    j.Bool(s.wakeup_fd);
    j.Key("registered_buffers");
    j.Bool(s.registered);
    j.Key("max_inline_size");
    j.Int(s.max_inline_size);
    j.Close('}');
    j.Key("results");
    j.Open('[');
    for (const SizeResult& r : s.sizes) {
      const bool streamed = r.plan.stream_messages > 0;
      j.Open('{');
      j.Key("size");
      j.Int(r.plan.size);
      j.Key("iters");
      j.Int(r.plan.iters);
      j.Key("warmup_per_round");
      j.Int(r.plan.warmup);
      j.Key("warmup_first_round");
      j.Int(r.plan.settle);
      j.Key("rounds");
      j.Int(r.plan.rounds);
      if (streamed) {
        j.Key("stream_messages");
        j.Int(r.plan.stream_messages);
        j.Key("stream_reps");
        j.Int(r.plan.stream_reps);
      }
      j.Key("ferry");
      ImplJson(j, r.ferry, streamed);
      for (size_t k = 0; k < run.references.size(); ++k) {
        j.Key(run.references[k].key);
        ImplJson(j, r.references[k], streamed);
      }
      j.Key("ratio");
      j.Open('{');
      for (size_t k = 0; k < run.references.size(); ++k) {
        j.Key(run.references[k].key);
        RatioJson(j, r.ferry, r.references[k], streamed);
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
    return Status(FERRY_UNKNOWN,
                  "cannot write --json file '" + path + "': " + std::strerror(errno));
  }
  return Status();
}

}  // namespace ferry::bench
