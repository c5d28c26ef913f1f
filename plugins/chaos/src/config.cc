#include "config.h"

#include "ferry_plugin/params.h"

#include "prng.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>

namespace ferry_chaos {
namespace {

constexpr uint64_t kMaxDelayUs = 60ull * 1000 * 1000;  // a minute

// The text of parameter `key` (an over-long one cut: its parse complains);
// false when unset.
bool RawParam(const char* key, std::string* out) {
  return ferry_plugin::GetParamText(key, out) != ferry_plugin::ParamText::kUnset;
}

Status Invalid(const char* key, const std::string& value, const char* want) {
  return Error(FERRY_INVALID_ARGUMENT,
               "chaos: parameter %s='%s' is not %s (set %s or the in-process "
               "setting chaos.%s)",
               key, value.c_str(), want, ferry_plugin::ParamEnvName(key).c_str(), key);
}

// Unsigned integer parameter in [lo, hi]; `*out` keeps its value when unset.
Status UintParam(const char* key, uint64_t lo, uint64_t hi, const char* want,
                 uint64_t* out, bool* was_set = nullptr) {
  std::string text;
  if (!RawParam(key, &text)) return Status();
  if (text == "true" || text == "yes" || text == "on") text = "1";
  if (text == "false" || text == "no" || text == "off") text = "0";
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 0);
  if (text.empty() || text[0] == '-' || end == text.c_str() || *end != '\0' ||
      errno == ERANGE || v < lo || v > hi) {
    return Invalid(key, text, want);
  }
  *out = v;
  if (was_set != nullptr) *was_set = true;
  return Status();
}

uint64_t SeedFromTime() {
  static std::atomic<uint64_t> counter{0};
  uint64_t t =
      static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  uint64_t s = t ^ (static_cast<uint64_t>(getpid()) << 32) ^
               SplitMix64(counter.fetch_add(1, std::memory_order_relaxed));
  return s;
}

}  // namespace

std::string Config::Describe() const {
  return Format(
      "seed=%llu%s delay_us_max=%llu reorder=%d dup_rate=%u "
      "drop_rate=%u max_inline_size=%llu",
      static_cast<unsigned long long>(seed), seed_from_time ? " (from the clock)" : "",
      static_cast<unsigned long long>(delay_us_max), reorder ? 1 : 0, dup_rate, drop_rate,
      static_cast<unsigned long long>(max_inline_size));
}

Status LoadConfig(Config* out) {
  Config c;
  std::string text;
  if (RawParam("inner", &text)) {
    if (text.empty()) return Invalid("inner", text, "a transport name (tcp)");
    c.inner = text;
  }
  uint64_t seed = 0;
  bool seed_set = false;
  Status st =
      UintParam("seed", 0, UINT64_MAX, "an unsigned 64-bit integer", &seed, &seed_set);
  if (!st.ok()) return st;
  c.seed_from_time = !seed_set;
  c.seed = seed_set ? seed : SeedFromTime();
  st = UintParam("delay_us_max", 0, kMaxDelayUs,
                 "a number of microseconds in 0..60000000", &c.delay_us_max);
  if (!st.ok()) return st;
  uint64_t reorder = c.delay_us_max > 0 ? 1 : 0;
  st = UintParam("reorder", 0, 1, "0 or 1", &reorder);
  if (!st.ok()) return st;
  c.reorder = reorder != 0;
  uint64_t rate = 0;
  st = UintParam("dup_rate", 0, 1000, "a per-mille rate in 0..1000", &rate);
  if (!st.ok()) return st;
  c.dup_rate = static_cast<uint32_t>(rate);
  rate = 0;
  st = UintParam("drop_rate", 0, 1000, "a per-mille rate in 0..1000", &rate);
  if (!st.ok()) return st;
  c.drop_rate = static_cast<uint32_t>(rate);
  st = UintParam("max_inline_size", 0, UINT64_MAX,
                 "a size in bytes (0: every segment inline)", &c.max_inline_size);
  if (!st.ok()) return st;
  uint64_t priority = 0;
  st = UintParam("priority", 0, 1000, "a priority in 0..1000", &priority);
  if (!st.ok()) return st;
  c.priority = static_cast<int32_t>(priority);
  *out = std::move(c);
  return Status();
}

}  // namespace ferry_chaos
