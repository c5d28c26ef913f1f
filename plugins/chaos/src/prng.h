// The pseudo-random numbers behind every chaos decision, spelled out so a
// seed replays the same decisions anywhere (README.md, "Replaying a seed").
//
// The generator is std::mt19937_64, whose output sequence the C++ standard
// fixes. The standard's distributions (uniform_int_distribution, shuffle)
// are implementation-defined, so they are not used: a value below n is
// `next() % n` (the bias, below 2^-50 for the ranges used here, is
// irrelevant for a test transport), and shuffles are the Fisher-Yates loop
// below.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace ferry_chaos {

// SplitMix64's output function: derives well-mixed seeds from small ones.
inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The seed of connection number `ordinal` (0, 1, ... in the order the
// context created its connections: connect() or ACCEPTED).
inline uint64_t ConnSeed(uint64_t seed, uint64_t ordinal) {
  return SplitMix64(seed ^ SplitMix64(ordinal + 1));
}

// The seed of the context's own stream (the order of a batch of releases).
inline uint64_t ContextSeed(uint64_t seed) {
  return SplitMix64(seed);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  uint64_t Next() { return engine_(); }
  // A value in [0, n); n > 0.
  uint64_t Below(uint64_t n) { return Next() % n; }

  // Fisher-Yates, from the back: for i = size-1 down to 1, swap element i
  // with element Below(i + 1).
  template <typename T>
  void Shuffle(std::vector<T>* v) {
    for (size_t i = v->size(); i > 1; --i) {
      size_t j = static_cast<size_t>(Below(i));
      if (j != i - 1) std::swap((*v)[i - 1], (*v)[j]);
    }
  }

 private:
  std::mt19937_64 engine_;
};

// The four draws every arrival consumes from its connection's stream, in
// this order, whatever the parameters (so changing one rate does not shift
// the others' decisions).
struct ArrivalDraws {
  uint64_t drop;       // dropped when drop % 1000 < drop_rate
  uint64_t dup;        // duplicated when not dropped and dup % 1000 < dup_rate
  uint64_t delay;      // original held delay % (delay_us_max + 1) microseconds
  uint64_t dup_delay;  // the duplicate's own delay, the same way
};

inline ArrivalDraws DrawArrival(Rng* rng) {
  ArrivalDraws d;
  d.drop = rng->Next();
  d.dup = rng->Next();
  d.delay = rng->Next();
  d.dup_delay = rng->Next();
  return d;
}

}  // namespace ferry_chaos
