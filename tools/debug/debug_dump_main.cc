// ferry-debug-dump (`ferry debug dump`): the debug dump of workers of a
// running job, from a process that is not one of them (docs/debugging.md,
// "From another process"). It reaches them through the job's store with the
// job's secret (ferry_debug_dump_remote) and prints JSON on stdout.
//
//   ferry debug dump [--store HOST:PORT] [--job JOB] [--worker NAME | --all]
//                    [--timeout-ms N]
//
// --store defaults to FERRY_STORE, --job to FERRY_JOB (else "default"); the
// secret is read from FERRY_SECRET_FILE or FERRY_SECRET only (never from
// the command line, where other users could read it), and there must be
// one. Without --worker: the worker hosting the store. --all: every live
// worker, as {"name": dump, ...}, asked one after the other (one that
// fails is {"error": "..."}).
#include <ferry/ferry.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

int Usage() {
  std::fprintf(stderr,
               "usage: ferry debug dump [--store HOST:PORT] [--job JOB] "
               "[--worker NAME | --all] [--timeout-ms N]\n"
               "  the job's secret comes from FERRY_SECRET_FILE or FERRY_SECRET\n");
  return 2;
}

struct Target {
  const char* store = nullptr;
  const char* job = nullptr;
  uint32_t timeout_ms = 0;
};

// The dump of `worker` ("" = the store's host), or the error's message.
bool Dump(const Target& t, const std::string& worker, std::string* out) {
  std::string buf(1 << 20, '\0');
  uint64_t len = 0;
  ferry_status_t s = ferry_debug_dump_remote(t.store, t.job, worker.c_str(), nullptr,
                                             t.timeout_ms, buf.data(), buf.size(), &len);
  if (s == FERRY_RESOURCE_EXHAUSTED) {
    buf.resize(len + len / 2 + 1);
    s = ferry_debug_dump_remote(t.store, t.job, worker.c_str(), nullptr, t.timeout_ms,
                                buf.data(), buf.size(), &len);
  }
  if (s != FERRY_OK) {
    *out = std::string(ferry_status_name(s)) + ": " + ferry_last_error();
    return false;
  }
  buf.resize(len);
  *out = std::move(buf);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Target t;
  std::string worker;
  bool all = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--all") {
      all = true;
    } else if (a == "--store" && (v = value())) {
      t.store = v;
    } else if (a == "--job" && (v = value())) {
      t.job = v;
    } else if (a == "--worker" && (v = value())) {
      worker = v;
    } else if (a == "--timeout-ms" && (v = value())) {
      t.timeout_ms = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
    } else {
      return Usage();
    }
  }
  if (all && !worker.empty()) return Usage();
  std::string text;
  if (!Dump(t, worker, &text)) {
    std::fprintf(stderr, "ferry debug dump: %s\n", text.c_str());
    return 1;
  }
  if (!all) {
    std::printf("%s\n", text.c_str());
    return 0;
  }
  // Every live member the store's host knows, itself included.
  const nlohmann::json host = nlohmann::json::parse(text);
  nlohmann::json out = nlohmann::json::object();
  const std::string host_name = host["worker"]["name"].get<std::string>();
  out[host_name] = host;
  int failed = 0;
  for (const auto& m : host["members"]) {
    const std::string name = m["name"].get<std::string>();
    if (name == host_name || m["state"] != "alive") continue;
    std::string dump;
    if (Dump(t, name, &dump)) {
      out[name] = nlohmann::json::parse(dump);
    } else {
      out[name] = {{"error", dump}};
      ++failed;
    }
  }
  std::printf("%s\n", out.dump(2).c_str());
  return failed == 0 ? 0 : 1;
}
