// ferry_plugin::Mutex: the lock of a plugin's hot path (tcp's context, shm's
// connections). One atomic compare-and-swap to take it and one atomic
// exchange to release it when nobody else wants it, which is the host's
// common case (one thread drives a context). std::mutex goes through
// pthread_mutex_lock/unlock, 50-75 instructions more per pair on that path
// (callgrind), paid on every send/place/discard/progress. Under contention it spins
// briefly and then sleeps on a futex (Drepper, "Futexes Are Tricky",
// mutex #3). Plain atomics with acquire/release ordering, so sanitizers see
// the synchronisation. Satisfies Lockable for std::lock_guard.
#pragma once

#include <atomic>
#include <cstdint>

namespace ferry_plugin {

class Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() {
    uint32_t expected = kFree;
    if (state_.compare_exchange_strong(expected, kLocked, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
      return;
    }
    LockContended();
  }

  bool try_lock() {
    uint32_t expected = kFree;
    return state_.compare_exchange_strong(expected, kLocked, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }

  void unlock() {
    if (state_.exchange(kFree, std::memory_order_release) == kContended) {
      WakeOne();
    }
  }

 private:
  static constexpr uint32_t kFree = 0;
  static constexpr uint32_t kLocked = 1;     // held, nobody sleeping
  static constexpr uint32_t kContended = 2;  // held, maybe sleepers

  void LockContended();
  void WakeOne();

  std::atomic<uint32_t> state_{kFree};
};

}  // namespace ferry_plugin
