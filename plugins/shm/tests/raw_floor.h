// The raw shared-memory floors the ping-pong driver prints beside the
// plugin: what two processes get with no transport at all, over one memfd
// both map.
//   slot: a 64-byte-aligned payload plus a sequence word per direction; the
//         receiver spins on the word, copies the payload out and answers
//         (the small-message floor).
//   ring: a 2 MiB byte ring per direction with head and tail on their own
//         cache lines, written and read in 256 KiB chunks (the ring-copy
//         floor for large messages: two copies, pipelined).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ferry_shm_test {

constexpr size_t kRawSlotMax = 4096;

// The region both processes map; RawRegionSize() bytes.
size_t RawRegionSize();
// The child's loop: serves series until the parent says stop.
void RawServe(void* region);
// One series: `iters` round trips of `size` bytes; returns RTTs in ns.
// Slot protocol when size <= kRawSlotMax, ring protocol otherwise.
std::vector<double> RawPingPong(void* region, uint64_t size, int iters);
void RawStop(void* region);

}  // namespace ferry_shm_test
