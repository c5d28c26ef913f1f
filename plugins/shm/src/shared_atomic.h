// Atomic access to words of shared memory. The segments are plain mmap'ed
// bytes, not C++ objects, so std::atomic<T> cannot be placed there; the GCC
// __atomic builtins give the same orderings on a plain T (and TSan models
// them).
#pragma once

#include <cstdint>

namespace ferry_shm {

template <typename T>
inline T LoadAcquire(const T* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
template <typename T>
inline T LoadRelaxed(const T* p) {
  return __atomic_load_n(p, __ATOMIC_RELAXED);
}
template <typename T>
inline void StoreRelease(T* p, T v) {
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
template <typename T>
inline void StoreRelaxed(T* p, T v) {
  __atomic_store_n(p, v, __ATOMIC_RELAXED);
}
template <typename T>
inline void StoreSeqCst(T* p, T v) {
  __atomic_store_n(p, v, __ATOMIC_SEQ_CST);
}
template <typename T>
inline T ExchangeSeqCst(T* p, T v) {
  return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
}
// The store-load barrier of the doorbell's Dekker handshake.
inline void FenceSeqCst() {
#if defined(__SANITIZE_THREAD__)
  // TSan does not support fences; a seq_cst read-modify-write is a full
  // barrier as well (it is what the kernel's smp_mb() uses on x86).
  static int barrier_word;
  __atomic_fetch_add(&barrier_word, 0, __ATOMIC_SEQ_CST);
#else
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

}  // namespace ferry_shm
