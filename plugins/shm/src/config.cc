#include "config.h"

#include "shm_layout.h"

#include "ferry_plugin/host.h"
#include "ferry_plugin/params.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

namespace ferry_shm {
namespace {

constexpr const char* kPlugin = "shm";
constexpr uint64_t kMinRing = 1ull << 20;
constexpr uint64_t kMaxRing = 1ull << 30;

// The text of parameter `key` (an over-long one cut); false when unset.
bool GetParam(const char* key, std::string* out) {
  return ferry_plugin::GetParamText(key, out) != ferry_plugin::ParamText::kUnset;
}

Status BadValue(const char* key, const std::string& value, const char* want) {
  const std::string env = ferry_plugin::ParamEnvName(key);
  return Error(FERRY_INVALID_ARGUMENT, "shm: parameter '%s' (%s) is '%s'; expected %s",
               key, env.c_str(), value.c_str(), want);
}

// Unsigned integer parameter with optional K/M/G suffix (binary units).
Status GetSize(const char* key, uint64_t lo, uint64_t hi, uint64_t* inout) {
  std::string v;
  if (!GetParam(key, &v)) return Status();
  char* end = nullptr;
  unsigned long long n = std::strtoull(v.c_str(), &end, 0);
  if (end == v.c_str()) return BadValue(key, v, "a number of bytes (e.g. 4M)");
  uint64_t mult = 1;
  if (*end == 'k' || *end == 'K')
    mult = 1ull << 10, ++end;
  else if (*end == 'm' || *end == 'M')
    mult = 1ull << 20, ++end;
  else if (*end == 'g' || *end == 'G')
    mult = 1ull << 30, ++end;
  if (*end != '\0' || n > hi / mult || n * mult < lo) {
    return BadValue(key, v,
                    Format("a size from %llu to %llu bytes", (unsigned long long)lo,
                           (unsigned long long)hi)
                        .c_str());
  }
  *inout = n * mult;
  return Status();
}

Status GetBool(const char* key, bool* inout) {
  std::string v;
  if (!GetParam(key, &v)) return Status();
  int64_t n = ferry_host_param_int(ferry_plugin::HostServices(), kPlugin, key, -1);
  if (n != 0 && n != 1) return BadValue(key, v, "0 or 1");
  *inout = n == 1;
  return Status();
}

// `cma`: 0, 1 or auto (README, "Data paths"); sets c->cma and c->cma_send.
Status GetCmaPolicy(Config* c) {
  std::string v;
  if (!GetParam("cma", &v) || v == "auto") {
    c->cma = true;
    c->cma_send = !c->busy_poll;
    return Status();
  }
  if (v != "0" && v != "1") return BadValue("cma", v, "0, 1 or auto");
  c->cma = c->cma_send = v == "1";
  return Status();
}

uint64_t RoundUpPow2(uint64_t v) {
  uint64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

}  // namespace

uint64_t Config::MaxMsgRecordBody() const {
  return sizeof(MsgBody) + uint64_t{max_segments} * (sizeof(SegmentDesc) + 8) +
         AlignUp(max_header_size, 8) + inline_budget + 8ull * max_segments;
}

std::string LocalDomain() {
  std::string boot = "unknown";
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  if (f) std::getline(f, boot);
  struct stat st {};
  unsigned long long ipc = 0;
  if (stat("/proc/self/ns/ipc", &st) == 0) ipc = st.st_ino;
  return Format("host=%s;ipc=%llu;user=%u", boot.c_str(), ipc,
                static_cast<unsigned>(getuid()));
}

Status LoadConfig(uint32_t init_flags, Config* out) {
  Config c;
  Status st;
  c.busy_poll = (init_flags & FERRY_INIT_BUSY_POLL) != 0;
  bool busy = c.busy_poll;
  if (!(st = GetBool("busy_poll", &busy)).ok()) return st;
  c.busy_poll = c.busy_poll || busy;
  uint64_t v = c.spin_us;
  if (!(st = GetSize("spin_us", 0, 1000000, &v)).ok()) return st;
  c.spin_us = static_cast<uint32_t>(v);
  if (!(st = GetSize("ring_size", kMinRing, kMaxRing, &c.ring_size)).ok()) return st;
  c.ring_size = RoundUpPow2(c.ring_size);
  c.chunk_size = c.ring_size / 8;
  if (!(st = GetSize("chunk_size", 4096, c.ring_size / 4, &c.chunk_size)).ok()) return st;
  c.chunk_size = AlignUp(c.chunk_size, kRecordAlign);
  if (!(st = GetSize("inline_max", 0, c.inline_budget, &c.inline_max)).ok()) return st;
  if (!(st = GetCmaPolicy(&c)).ok()) return st;
  if (!(st = GetSize("cma_min", 1, uint64_t{1} << 40, &c.cma_min)).ok()) return st;
  if (!(st = GetSize("cma_max", 0, uint64_t{1} << 40, &c.cma_max)).ok()) return st;
  if (!(st = GetSize("max_message_size", 1, kSegLengthMask, &c.max_message_size)).ok()) {
    return st;
  }
  v = c.connect_timeout_ms;
  if (!(st = GetSize("connect_timeout_ms", 1, 3600000, &v)).ok()) return st;
  c.connect_timeout_ms = static_cast<uint32_t>(v);
  GetParam("socket_dir", &c.socket_dir);
  if (!GetParam("domain_override", &c.domain) || c.domain.empty()) {
    c.domain = LocalDomain();
  }
  // Every legal message's record must fit a quarter of the ring, so a
  // record never waits for more space than the ring has.
  if (c.MaxMsgRecordBody() + kRecordAlign > c.ring_size / 4) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "shm: ring_size %llu is too small for %u-byte headers and "
                 "%llu inline bytes per message",
                 (unsigned long long)c.ring_size, c.max_header_size,
                 (unsigned long long)c.inline_budget);
  }
  *out = c;
  return Status();
}

}  // namespace ferry_shm
