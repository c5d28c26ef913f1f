// The receive-buffer pool: large received tensors land in memory that is
// already faulted in, and freeing one makes it the next one's buffer.
#include "engine/receive_buffers.h"

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace {

namespace rb = ferry::receive_buffers;

long MinorFaults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

long FaultsDuring(const std::function<void()>& f) {
  const long before = MinorFaults();
  f();
  return MinorFaults() - before;
}

// Writes every page, as a transport placing a message does.
void Fill(void* p, size_t n, int byte) {
  std::memset(p, byte, n);
}

// Faults allowed for writing n bytes: far below one per 4 KiB page (what a
// fresh allocation costs), with room for a sanitizer's shadow memory,
// which faults in as it is first touched (ASan: a page per 8 pages of data).
long FaultBound(size_t n) {
  return static_cast<long>(n / 4096 / 4);
}

bool KernelCanPrefault() {
  void* p =
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  const bool ok = madvise(p, 4096, MADV_POPULATE_WRITE) == 0;
  munmap(p, 4096);
  return ok;
}

TEST(ReceiveBuffers, LargeBufferIsReusedAfterRelease) {
  const size_t n = 6u << 20;
  const rb::Stats before = rb::GetStats();
  void* a = rb::Allocate(n);
  Fill(a, n, 1);
  rb::Release(a, n);
  void* b = rb::Allocate(n - 4096);  // the same size class
  EXPECT_EQ(b, a) << "a released buffer of the same size class must be reused";
  Fill(b, n - 4096, 2);
  rb::Release(b, n - 4096);
  const rb::Stats after = rb::GetStats();
  EXPECT_EQ(after.reused - before.reused, 1u);
  EXPECT_EQ(after.mapped - before.mapped, 1u);
  EXPECT_GE(after.cached_bytes, n);
  EXPECT_LE(after.cached_bytes, after.limit_bytes);
}

TEST(ReceiveBuffers, ReusedBufferCostsNoPageFaults) {
  const size_t n = 32u << 20;  // 8192 pages of 4 KiB
  void* a = rb::Allocate(n);
  Fill(a, n, 1);
  rb::Release(a, n);
  void* b = nullptr;
  const long taken = FaultsDuring([&] {
    b = rb::Allocate(n);
    Fill(b, n, 2);
  });
  rb::Release(b, n);
  EXPECT_LT(taken, FaultBound(n))
      << "receiving into a reused buffer faulted " << taken << " times";
}

TEST(ReceiveBuffers, FreshLargeBufferIsFaultedInBeforeUse) {
  if (!KernelCanPrefault()) GTEST_SKIP() << "kernel without MADV_POPULATE_WRITE (< 5.14)";
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "under TSan the first write to new memory faults in its shadow "
                  "(several times the data), so the fault count says nothing";
#endif
  rb::Trim();  // no cached buffer to reuse
  const size_t n = 32u << 20;
  void* a = rb::Allocate(n);
  const long taken = FaultsDuring([&] { Fill(a, n, 3); });
  rb::Release(a, n);
  EXPECT_LT(taken, FaultBound(n))
      << "the first write into a fresh buffer faulted " << taken << " times";
}

TEST(ReceiveBuffers, SizeClassesDoNotShareBuffers) {
  rb::Trim();
  void* a = rb::Allocate(3u << 20);
  rb::Release(a, 3u << 20);
  const rb::Stats before = rb::GetStats();
  void* b = rb::Allocate(5u << 20);  // another class: 3 MiB's is too small
  EXPECT_EQ(rb::GetStats().reused, before.reused);
  Fill(b, 5u << 20, 4);
  rb::Release(b, 5u << 20);
}

TEST(ReceiveBuffers, SmallBuffersAreAlignedAndNotPooled) {
  const rb::Stats before = rb::GetStats();
  for (size_t n :
       {size_t{0}, size_t{1}, size_t{100}, size_t{64 << 10}, rb::kPooledMin - 1}) {
    void* p = rb::Allocate(n);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << n << " bytes";
    Fill(p, n, 5);
    rb::Release(p, n);
  }
  const rb::Stats after = rb::GetStats();
  EXPECT_EQ(after.mapped, before.mapped);
  EXPECT_EQ(after.reused, before.reused);
}

TEST(ReceiveBuffers, TrimGivesEverythingBack) {
  void* a = rb::Allocate(2u << 20);
  rb::Release(a, 2u << 20);
  EXPECT_GT(rb::GetStats().cached_bytes, 0u);
  rb::Trim();
  EXPECT_EQ(rb::GetStats().cached_bytes, 0u);
}

// A buffer is given back once it has sat unused for the idle time, and
// not before; one taken again in between starts afresh.
TEST(ReceiveBuffers, BuffersIdleLongerThanTheIdleTimeAreGivenBack) {
  rb::Trim();
  void* a = rb::Allocate(3u << 20);
  void* b = rb::Allocate(5u << 20);
  rb::Release(a, 3u << 20);
  rb::Release(b, 5u << 20);
  const uint64_t cached = rb::GetStats().cached_bytes;
  ASSERT_GE(cached, 8u << 20);
  EXPECT_EQ(rb::TrimIdle(std::chrono::hours(1)), 0u);
  EXPECT_EQ(rb::GetStats().cached_bytes, cached);
  void* again = rb::Allocate(5u << 20);                       // taken from the cache
  const uint64_t still_cached = rb::GetStats().cached_bytes;  // a's only
  EXPECT_LT(still_cached, cached);
  EXPECT_EQ(rb::TrimIdle(std::chrono::seconds(0)), still_cached);
  EXPECT_EQ(rb::GetStats().cached_bytes, 0u);
  rb::Release(again, 5u << 20);  // cached again, its idle time from now
  EXPECT_EQ(rb::TrimIdle(std::chrono::hours(1)), 0u);
  EXPECT_GT(rb::GetStats().cached_bytes, 0u);
  rb::Trim();
}

}  // namespace
