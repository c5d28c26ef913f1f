// Host memory for received payloads.
//
// A large tensor that arrives in fresh memory pays a page fault per 4 KiB
// page on first write (16 384 for 64 MiB, each zeroing its page), and the
// pages go back to the kernel when the tensor is freed (glibc serves
// allocations above 32 MiB with mmap/munmap every time). A program that
// receives tensors of the same sizes over and over (an echo, a parameter
// server, pipeline stages) then spends more time faulting than copying.
//
// So buffers of kPooledMin bytes and more are mapped here, backed by
// transparent huge pages where the kernel allows it, pre-faulted when they
// are created, and kept when released, for the next buffer of the same
// size class. Size classes are four per doubling (at most 25% unused).
// The cache is bounded (FERRY_RECEIVE_POOL_MB, default 256; 0 turns the
// pool off); beyond the bound a released buffer is unmapped at once. A
// buffer nobody took for FERRY_RECEIVE_POOL_IDLE_S seconds (default 30; 0:
// never) goes back to the kernel too (the engine's timer calls TrimIdle),
// so a burst of large tensors does not keep its memory for good.
// Smaller buffers come from malloc, which reuses them well enough.
//
// Process-wide and thread-safe: a received tensor may be freed by any
// thread, after the worker that received it is gone.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace ferry::receive_buffers {

constexpr size_t kPooledMin = size_t{1} << 20;

// n bytes (n may be 0), 64-byte aligned. Throws std::bad_alloc.
void* Allocate(size_t n);
// Gives back what Allocate(n) returned, with the same n. nullptr is a no-op.
void Release(void* p, size_t n);

struct Stats {
  uint64_t reused = 0;        // Allocate served from the cache
  uint64_t mapped = 0;        // Allocate that mapped a new buffer
  uint64_t cached_bytes = 0;  // held for reuse now
  uint64_t limit_bytes = 0;
};
Stats GetStats();
// Unmaps every cached buffer (tests; a program that wants its memory back).
void Trim();
// Unmaps the cached buffers released at least `idle` ago; returns the bytes
// given back.
size_t TrimIdle(std::chrono::steady_clock::duration idle);
// FERRY_RECEIVE_POOL_IDLE_S in seconds (default 30; 0 means never trim),
// read once.
std::chrono::seconds IdleTimeFromEnvironment();

}  // namespace ferry::receive_buffers
