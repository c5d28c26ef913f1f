// CLOCK_MONOTONIC in nanoseconds (a vDSO call: no syscall).
#pragma once

#include <time.h>

#include <cstdint>

namespace ferry_shm {

inline uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull +
         static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace ferry_shm
