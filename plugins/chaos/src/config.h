// The settings of one chaos context, read once at init() through the host's
// parameter service (in-process setting, then FERRY_CHAOS_<KEY>). An invalid
// value fails init() with FERRY_INVALID_ARGUMENT and a message naming the
// variable: a test that asks for chaos must get exactly the chaos it asked
// for, never a silently clamped one. README.md lists every key.
#pragma once

#include "status.h"

#include <cstdint>
#include <string>

namespace ferry_chaos {

struct Config {
  std::string inner = "tcp";  // the wrapped transport: a name or a path
  uint64_t seed = 0;
  bool seed_from_time = true;  // no seed given: derived from the clock
  uint64_t delay_us_max = 0;   // each arrival held 0..max microseconds
  bool reorder = false;        // release held arrivals in random order
  uint32_t dup_rate = 0;       // per mille: an arrival delivered twice
  uint32_t drop_rate = 0;      // per mille: an arrival silently dropped
  // Segments longer than this arrive not inline (the host place()s them and
  // chaos copies from its buffer). 0: every segment arrives inline, and
  // query() says so (max_inline_size = max_message_size).
  uint64_t max_inline_size = 0;
  int32_t priority = 0;  // routing priority: below every real one

  std::string Describe() const;  // "seed=... delay_us_max=..." for logs
};

Status LoadConfig(Config* out);

}  // namespace ferry_chaos
