#include "ferry_plugin/mutex.h"

#include "ferry_support/cpu_relax.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace ferry_plugin {
namespace {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "the futex word must be a plain lock-free 32-bit integer");

// Holders keep the lock for microseconds (non-blocking syscalls, copies):
// spinning that long is cheaper than a futex round trip, but only while the
// holder is running, so the spin is short and then the waiter sleeps.
constexpr int kSpins = 100;

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, nullptr,
                 nullptr, 0);
}

}  // namespace

void Mutex::LockContended() {
  for (int i = 0; i < kSpins; ++i) {
    ferry_support::CpuRelax();
    uint32_t expected = kFree;
    if (state_.load(std::memory_order_relaxed) == kFree &&
        state_.compare_exchange_weak(expected, kLocked, std::memory_order_acquire,
                                     std::memory_order_relaxed)) {
      return;
    }
  }
  // Mark the lock contended; whoever releases it then wakes one sleeper.
  // Taking it this way leaves it marked contended, which at worst costs one
  // spurious wake-up later.
  while (state_.exchange(kContended, std::memory_order_acquire) != kFree) {
    Futex(&state_, FUTEX_WAIT_PRIVATE, kContended);  // EAGAIN/EINTR: retry
  }
}

void Mutex::WakeOne() {
  Futex(&state_, FUTEX_WAKE_PRIVATE, 1);
}

}  // namespace ferry_plugin
