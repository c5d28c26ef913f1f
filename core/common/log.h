// The host's logger: one process-wide sink (stderr) shared by the core and,
// through ferry_host_services_t::log, by every plugin. FERRY_LOG_LEVEL
// (error, warn, info, debug, trace, or 0-4) sets the level; default: warn.
#pragma once

#include <ferry/common.h>

#include <cstdint>
#include <string>

namespace ferry::log {

// The level in force (FERRY_LOG_* from ferry/common.h). Read from
// FERRY_LOG_LEVEL on first use.
int32_t Level();
void SetLevel(int32_t level);
// Parses "warn" / "2" etc.; returns -1 when `text` is not a level name.
int32_t ParseLevel(const std::string& text);
const char* LevelName(int32_t level);

// Writes one line "[ferry <level> <component>] message" when enabled.
// Thread-safe; lines never interleave.
void Write(int32_t level, const char* component, const std::string& message);

inline bool Enabled(int32_t level) {
  return level <= Level();
}

}  // namespace ferry::log

#define FERRY_LOG(level, component, message)            \
  do {                                                  \
    if (::ferry::log::Enabled(level)) {                 \
      ::ferry::log::Write(level, component, (message)); \
    }                                                   \
  } while (0)
