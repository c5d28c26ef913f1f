// Deterministic byte patterns: a sender fills a payload from a seed and the
// receiver checks it against the same seed, without either keeping a copy.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry::testkit {

// Fills `data` with a pseudo-random sequence determined by `seed`.
void FillPattern(void* data, size_t len, uint64_t seed);
// Offset of the first byte that differs from FillPattern(seed), or -1.
int64_t PatternMismatch(const void* data, size_t len, uint64_t seed);

}  // namespace ferry::testkit
