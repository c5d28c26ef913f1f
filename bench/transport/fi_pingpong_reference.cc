#include "transport/fi_pingpong_reference.h"

#include "transport/external_program.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

namespace ferry::bench {
namespace {

constexpr int kStartTimeoutMs = 60000;  // process start, getinfo, listen
constexpr int kRunTimeoutMs = 900000;   // the whole-run watchdog bounds it too
constexpr int kPortAttempts = 3;
constexpr double kMinBatchSeconds = 2.0;
constexpr uint32_t kMaxBatchFactor = 20;
// The control lines of a batch: the client asks for each run (RUN size
// iterations), the server answers once its fi_pingpong listens (READY port),
// and END closes the batch.
const char kRunTag[] = "FI_PINGPONG_RUN";
const char kReadyTag[] = "FI_PINGPONG_READY";
const char kEndTag[] = "FI_PINGPONG_END";
// What fi_pingpong -v prints once its control socket listens (1.17).
const char kListening[] = "waiting for connection";

// A port that is free now, for fi_pingpong's control socket (it binds
// INADDR_ANY itself). Another process could take it before fi_pingpong
// binds: the server then fails to start and the next attempt picks again.
StatusOr<uint16_t> FreeTcpPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return Status(FERRY_UNKNOWN, std::string("socket: ") + std::strerror(errno));
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int e = errno;
    close(fd);
    return Status(FERRY_UNKNOWN, std::string("bind: ") + std::strerror(e));
  }
  close(fd);
  return ntohs(addr.sin_port);
}

std::vector<std::string> CommonArgs(const std::string& program,
                                    const std::string& provider, uint64_t size,
                                    uint32_t iters) {
  return {program,
          "-p",
          provider,
          "-e",
          "rdm",
          "-I",
          std::to_string(iters),
          "-S",
          std::to_string(size)};
}

}  // namespace

uint32_t FiPingPongWarmup(uint32_t warmup) {
  return std::max(1u, warmup);
}

StatusOr<FiPingPongReport> ParseFiPingPongOutput(const std::string& text) {
  std::istringstream lines(text);
  std::string line;
  bool header = false;
  while (std::getline(lines, line)) {
    if (line.rfind("bytes", 0) == 0 && line.find("usec/xfer") != std::string::npos) {
      header = true;
      continue;
    }
    if (!header) continue;
    // bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec, e.g.
    // "64      10k     =10k     1.2m        0.78s      1.63      39.15       0.03"
    std::istringstream words(line);
    std::vector<std::string> w;
    std::string word;
    while (words >> word) w.push_back(word);
    if (w.size() != 8) break;
    char* end = nullptr;
    FiPingPongReport r;
    r.usec_per_xfer = std::strtod(w[6].c_str(), &end);
    if (end != w[6].c_str() && *end == '\0' && r.usec_per_xfer > 0) {
      return r;
    }
    break;
  }
  return Status(FERRY_DATA_LOSS,
                "cannot read fi_pingpong's result (expected a header with "
                "usec/xfer and one line of 8 fields); it printed:\n" +
                    text);
}

StatusOr<double> FiPingPongClient::RunOnce(uint64_t size, uint32_t iters) {
  Status asked = control_->Send(std::string(kRunTag) + " " + std::to_string(size) + " " +
                                std::to_string(iters));
  if (!asked.ok()) return asked;
  auto ready = control_->Receive(kStartTimeoutMs);
  if (!ready.ok()) return ready.status();
  std::istringstream words(ready.value());
  std::string tag;
  unsigned port = 0;
  words >> tag >> port;
  if (tag != kReadyTag || port == 0 || port > 65535) {
    return Status(FERRY_INTERNAL,
                  "fi_pingpong: unexpected control message '" + ready.value() + "'");
  }
  std::vector<std::string> argv = CommonArgs(program_, provider_, size, iters);
  for (const char* a : {"-P", "", "127.0.0.1"}) argv.push_back(a);
  argv[argv.size() - 2] = std::to_string(port);
  auto client = ExternalProgram::Start(argv);
  if (!client.ok()) return client.status();
  Status st = client.value()->Finish(kRunTimeoutMs);
  if (!st.ok()) return st;
  auto report = ParseFiPingPongOutput(client.value()->out());
  if (!report.ok()) return report.status();
  return 2.0 * report.value().usec_per_xfer * iters;
}

Status FiPingPongClient::Run(uint64_t size, uint32_t warmup, uint32_t iters, double share,
                             BatchResult* out) {
  const uint32_t short_run = FiPingPongWarmup(warmup);
  auto t_short = RunOnce(size, short_run);
  if (!t_short.ok()) return t_short.status();
  auto t_long = RunOnce(size, short_run + iters);
  if (!t_long.ok()) return t_long.status();
  // Too short a batch leaves the set-up's variation (tens of ms on
  // tcp;ofi_rxm) a large share of the difference: once, run long enough to
  // last this batch's share of kMinBatchSeconds at the pace just seen (at
  // most kMaxBatchFactor times the plan's count).
  const double min_us = kMinBatchSeconds * 1e6 * share;
  const double seen_us = t_long.value() - t_short.value();
  if (seen_us < min_us) {
    const double per_rt_us =
        seen_us > 0 ? seen_us / iters : t_long.value() / (short_run + iters);
    const double wanted =
        std::min(min_us / per_rt_us, static_cast<double>(iters) * kMaxBatchFactor);
    if (wanted > iters * 1.5) {
      iters = static_cast<uint32_t>(wanted);
      t_long = RunOnce(size, short_run + iters);
      if (!t_long.ok()) return t_long.status();
    }
  }
  Status st = control_->Send(kEndTag);
  if (!st.ok()) return st;
  const double us = t_long.value() - t_short.value();
  out->iters = iters;
  char method[160];
  std::snprintf(method, sizeof method,
                "(%.0f us for %u round trips - %.0f us for %u) / %u", t_long.value(),
                short_run + iters, t_short.value(), short_run, iters);
  out->method = method;
  if (us <= 0) {
    // Too few iterations to see past the set-up's variation (a smoke run):
    // no figure rather than a wrong one.
    out->mean_rtt_ns = std::nan("");
    out->note =
        "the longer run took no longer than the warm-up run: its "
        "set-up time varies more than the run lasts (use more "
        "--iters or --budget)";
    std::fprintf(stderr, "note: fi_pingpong, size %llu: %s\n",
                 static_cast<unsigned long long>(size), out->note.c_str());
    return Status();
  }
  out->mean_rtt_ns = us * 1e3 / iters;
  return Status();
}

Status FiPingPongServer::ServeOnce(uint64_t size, uint32_t iters) {
  Status last;
  for (int attempt = 0; attempt < kPortAttempts; ++attempt) {
    auto port = FreeTcpPort();
    if (!port.ok()) return port.status();
    std::vector<std::string> argv = CommonArgs(program_, provider_, size, iters);
    argv.insert(argv.begin() + 1, "-v");  // prints when it listens
    argv.push_back("-B");
    argv.push_back(std::to_string(port.value()));
    auto server = ExternalProgram::Start(argv);
    if (!server.ok()) return server.status();
    auto listening = server.value()->WaitForStderrLine(kListening, kStartTimeoutMs);
    if (!listening.ok()) return listening.status();
    if (!listening.value()) {
      // It exited before listening (the port was taken, or worse): keep
      // its words for the error if every attempt fails.
      last = server.value()->Finish(kStartTimeoutMs);
      if (last.ok()) {
        last = Status(FERRY_UNKNOWN, "fi_pingpong exited before listening");
      }
      continue;
    }
    Status st =
        control_->Send(std::string(kReadyTag) + " " + std::to_string(port.value()));
    if (!st.ok()) return st;
    return server.value()->Finish(kRunTimeoutMs);
  }
  return last;
}

Status FiPingPongServer::Serve(uint64_t size) {
  for (;;) {
    auto line = control_->Receive(kRunTimeoutMs);
    if (!line.ok()) return line.status();
    if (line.value() == kEndTag) return Status();
    std::istringstream words(line.value());
    std::string tag;
    unsigned long long run_size = 0, iters = 0;
    words >> tag >> run_size >> iters;
    if (tag != kRunTag || run_size != size || iters == 0 || iters > INT32_MAX) {
      return Status(FERRY_INTERNAL, "fi_pingpong: unexpected control message '" +
                                        line.value() + "' (size " + std::to_string(size) +
                                        ")");
    }
    Status st = ServeOnce(size, static_cast<uint32_t>(iters));
    if (!st.ok()) return st;
  }
}

}  // namespace ferry::bench
