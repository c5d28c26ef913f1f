// Human-readable names for capability bits, memory kinds and devices, shared
// by `ferry info`, the conformance reports and log messages.
#pragma once

#include <ferry/transport.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ferry {

std::vector<std::string> CapabilityNames(uint64_t caps);   // "wakeup_fd", ...
std::vector<std::string> MemoryKindNames(uint64_t kinds);  // "host", "cuda"
std::string DeviceName(ferry_device_t device);             // "cpu:0"

}  // namespace ferry
