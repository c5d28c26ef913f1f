// CpuRelax(): the hint a spin-wait gives the CPU between two looks at a
// flag, so a spinning thread yields pipeline resources to its sibling
// hyper-thread and exits the loop without a memory-order mis-speculation.
// Portable: PAUSE on x86, YIELD on Arm, nothing elsewhere (the loop then
// only spins). Header-only and dependency-free, so the core, the plugins,
// their tests and the benchmarks all use this one definition.
#pragma once

namespace ferry_support {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace ferry_support
