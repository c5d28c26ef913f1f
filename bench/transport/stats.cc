#include "transport/stats.h"

#include <algorithm>
#include <cmath>

namespace ferry::bench {
namespace {

// Nearest rank: the smallest sample with at least p% of the samples at or
// below it.
double Percentile(const std::vector<double>& sorted, double p) {
  const double rank = std::ceil(p / 100.0 * static_cast<double>(sorted.size()));
  size_t index = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return sorted[std::min(index, sorted.size() - 1)];
}

}  // namespace

Summary Summarize(std::vector<double>* samples) {
  Summary s;
  if (samples->empty()) return s;
  std::sort(samples->begin(), samples->end());
  const std::vector<double>& v = *samples;
  s.count = v.size();
  s.min = v.front();
  s.max = v.back();
  // The median of an even count is the mean of the two middle samples.
  const size_t mid = v.size() / 2;
  s.median = v.size() % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
  s.p90 = Percentile(v, 90);
  s.p99 = Percentile(v, 99);
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  return s;
}

}  // namespace ferry::bench
