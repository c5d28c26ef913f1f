#include "common/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace ferry::log {
namespace {

constexpr int32_t kDefaultLevel = FERRY_LOG_WARN;

int32_t LevelFromEnvironment() {
  const char* env = std::getenv("FERRY_LOG_LEVEL");
  if (env == nullptr || *env == '\0') return kDefaultLevel;
  int32_t level = ParseLevel(env);
  if (level < 0) {
    std::fprintf(stderr,
                 "[ferry warn log] FERRY_LOG_LEVEL=%s is not a level; use one "
                 "of error, warn, info, debug, trace (or 0-4). Using warn.\n",
                 env);
    return kDefaultLevel;
  }
  return level;
}

std::atomic<int32_t>& LevelCell() {
  static std::atomic<int32_t> level{LevelFromEnvironment()};
  return level;
}

}  // namespace

int32_t Level() {
  return LevelCell().load(std::memory_order_relaxed);
}
void SetLevel(int32_t level) {
  LevelCell().store(level, std::memory_order_relaxed);
}

int32_t ParseLevel(const std::string& text) {
  static const char* const kNames[] = {"error", "warn", "info", "debug", "trace"};
  for (int32_t i = 0; i < 5; ++i) {
    if (text == kNames[i]) return i;
  }
  if (text == "warning") return FERRY_LOG_WARN;
  if (text.size() == 1 && text[0] >= '0' && text[0] <= '4') return text[0] - '0';
  return -1;
}

const char* LevelName(int32_t level) {
  static const char* const kNames[] = {"error", "warn", "info", "debug", "trace"};
  return (level >= 0 && level <= 4) ? kNames[level] : "?";
}

void Write(int32_t level, const char* component, const std::string& message) {
  if (!Enabled(level)) return;
  // One fprintf per line under a mutex: lines from plugin threads and the
  // core never interleave mid-line.
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "[ferry %s %s] %s\n", LevelName(level),
               component != nullptr ? component : "-", message.c_str());
}

}  // namespace ferry::log
