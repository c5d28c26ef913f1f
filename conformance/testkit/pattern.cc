#include "testkit/pattern.h"

#include <cstring>

namespace ferry::testkit {
namespace {

// xorshift64*: fast enough to fill and check 64 MiB in a few milliseconds.
inline uint64_t Next(uint64_t* state) {
  uint64_t x = *state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return x * 0x2545F4914F6CDD1DULL;
}

inline uint64_t Seed(uint64_t seed) {
  // Never zero (xorshift would stay at zero) and different for nearby seeds.
  return (seed * 0x9E3779B97F4A7C15ULL) ^ 0xD1B54A32D192ED03ULL;
}

}  // namespace

void FillPattern(void* data, size_t len, uint64_t seed) {
  uint64_t state = Seed(seed);
  auto* p = static_cast<unsigned char*>(data);
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t v = Next(&state);
    std::memcpy(p + i, &v, 8);
  }
  if (i < len) {
    uint64_t v = Next(&state);
    std::memcpy(p + i, &v, len - i);
  }
}

int64_t PatternMismatch(const void* data, size_t len, uint64_t seed) {
  uint64_t state = Seed(seed);
  const auto* p = static_cast<const unsigned char*>(data);
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t v = Next(&state);
    if (std::memcmp(p + i, &v, 8) != 0) {
      for (size_t k = 0; k < 8; ++k) {
        if (p[i + k] != reinterpret_cast<const unsigned char*>(&v)[k]) {
          return static_cast<int64_t>(i + k);
        }
      }
    }
  }
  if (i < len) {
    uint64_t v = Next(&state);
    for (size_t k = 0; i + k < len; ++k) {
      if (p[i + k] != reinterpret_cast<const unsigned char*>(&v)[k]) {
        return static_cast<int64_t>(i + k);
      }
    }
  }
  return -1;
}

}  // namespace ferry::testkit
