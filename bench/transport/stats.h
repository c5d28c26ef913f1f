// Order statistics of a set of samples. Medians and tails, not means: a
// latency distribution on a shared machine has a long right tail (timer
// interrupts, the other process being descheduled), and a mean mixes the
// two. Percentiles use the nearest-rank definition, so p99 of 20 samples is
// the largest one: the report prints the sample count beside it.
#pragma once

#include <cstdint>
#include <vector>

namespace ferry::bench {

struct Summary {
  uint64_t count = 0;
  double min = 0, median = 0, p90 = 0, p99 = 0, max = 0, mean = 0;
};

// Sorts `samples` in place.
Summary Summarize(std::vector<double>* samples);

}  // namespace ferry::bench
