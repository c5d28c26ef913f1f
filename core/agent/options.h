// ferry::AgentOptions: how a worker starts, filled in by the C API
// (api/ferry_c.cc) from ferry_worker_options_t and the FERRY_* environment.
#pragma once

#include "common/limits.h"
#include "engine/device_memory.h"

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace ferry {

struct AgentOptions {
  std::string name;
  std::string job = "default";
  std::vector<std::string> transports{"tcp"};  // or every plugin for "auto"
  bool auto_select = false;  // "auto": skip plugins that do not open here
  std::string store_address;
  bool host_store = false;
  std::string secret;
  bool busy_poll = false;
  std::chrono::milliseconds default_timeout{30000};
  std::chrono::milliseconds peer_timeout{3000};
  std::chrono::milliseconds join_timeout{10000};
  unsigned executor_threads = 4;
  // A static job (docs/membership.md): world_size > 0 workers, this one of
  // rank `rank` (0..world_size-1). 0: an elastic job, rank unused. The C
  // API resolves both from the options or WORLD_SIZE / RANK.
  uint32_t world_size = 0;
  int32_t rank = -1;
  // A static job's start waits this long for every rank to join.
  std::chrono::milliseconds start_timeout{300000};
  // Where received device tensors are allocated (else the device
  // transport's allocator).
  std::optional<AppDeviceAllocator> device_allocator;
  // What peers and callers may use (docs/limits.md); the agent enforces
  // the call limits, the engine the others.
  Limits limits;
};

}  // namespace ferry
