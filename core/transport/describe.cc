#include "transport/describe.h"

#include <string>
#include <vector>

namespace ferry {
namespace {

struct BitName {
  uint64_t bit;
  const char* name;
};

std::vector<std::string> Names(uint64_t bits, const BitName* table, size_t n) {
  std::vector<std::string> out;
  uint64_t known = 0;
  for (size_t i = 0; i < n; ++i) {
    known |= table[i].bit;
    if (bits & table[i].bit) out.emplace_back(table[i].name);
  }
  for (int b = 0; b < 64; ++b) {
    uint64_t bit = uint64_t{1} << b;
    if ((bits & bit) && !(known & bit)) out.push_back("bit" + std::to_string(b));
  }
  return out;
}

}  // namespace

std::vector<std::string> CapabilityNames(uint64_t caps) {
  static const BitName kCaps[] = {
      {FERRY_CAP_WAKEUP_FD, "wakeup_fd"},
      {FERRY_CAP_DETECTS_PEER_DEATH, "detects_peer_death"},
      {FERRY_CAP_ORDERED, "ordered"},
      {FERRY_CAP_THREAD_SAFE, "thread_safe"},
      {FERRY_CAP_REGISTRATION, "registration"},
      {FERRY_CAP_DEVICE_REG_REQUIRED, "device_reg_required"},
      {FERRY_CAP_BUSY_POLL, "busy_poll"},
      {FERRY_CAP_ZERO_COPY_RECV, "zero_copy_recv"},
  };
  return Names(caps, kCaps, sizeof kCaps / sizeof kCaps[0]);
}

std::vector<std::string> MemoryKindNames(uint64_t kinds) {
  static const BitName kKinds[] = {
      {FERRY_MEM_HOST, "host"},
      {FERRY_MEM_CUDA, "cuda"},
      {FERRY_MEM_ROCM, "rocm"},
      {FERRY_MEM_CUDA_MANAGED, "cuda_managed"},
  };
  return Names(kinds, kKinds, sizeof kKinds / sizeof kKinds[0]);
}

std::string DeviceName(ferry_device_t device) {
  const char* type = nullptr;
  switch (device.type) {
    case FERRY_DEVICE_CPU:
      type = "cpu";
      break;
    case FERRY_DEVICE_CUDA:
      type = "cuda";
      break;
    case FERRY_DEVICE_CUDA_HOST:
      type = "cuda_host";
      break;
    case FERRY_DEVICE_ROCM:
      type = "rocm";
      break;
    case FERRY_DEVICE_CUDA_MANAGED:
      type = "cuda_managed";
      break;
    default:
      return "device" + std::to_string(device.type) + ":" + std::to_string(device.id);
  }
  return std::string(type) + ":" + std::to_string(device.id);
}

}  // namespace ferry
