// Where a program's CUDA driver time goes: with FERRY_CUDA_PROFILE=1 in the
// environment, every driver entry point of ferry_cuda::Driver is timed on
// the host, and at exit the process prints one table to stderr: calls,
// total, mean and max time per entry point, and how many queries found
// their work not finished yet (cuEventQuery / cuStreamQuery returning
// CUDA_ERROR_NOT_READY: GPU time the host waited out). Stages a component
// times itself (a cuda_ipc message's send-to-ACK, say) go in the same table
// through Stage().
//
// Why by hand: the driver is opened with dlopen (cuda_driver.h), so
// LD_PRELOAD interposers and ltrace never see the calls, and Nsight Systems
// is not on every machine that needs an answer. Off (the default), nothing
// is wrapped and Stage() costs one relaxed load.
//
// Each shared object that includes cuda_driver.h has its own Driver, so
// each prints its own table, labelled with its file name.
#pragma once

#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace ferry_cuda {
namespace profile {

using Clock = std::chrono::steady_clock;

struct Counter {
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> total_ns{0};
  std::atomic<uint64_t> max_ns{0};
  std::atomic<uint64_t> not_ready{0};

  void Add(uint64_t ns, bool was_not_ready = false) {
    calls.fetch_add(1, std::memory_order_relaxed);
    total_ns.fetch_add(ns, std::memory_order_relaxed);
    uint64_t m = max_ns.load(std::memory_order_relaxed);
    while (ns > m && !max_ns.compare_exchange_weak(m, ns, std::memory_order_relaxed)) {
    }
    if (was_not_ready) not_ready.fetch_add(1, std::memory_order_relaxed);
  }
};

inline std::atomic<bool>& EnabledFlag() {
  static std::atomic<bool> on{false};
  return on;
}

// True when FERRY_CUDA_PROFILE is set to anything but "" or "0".
inline bool Requested() {
  const char* v = std::getenv("FERRY_CUDA_PROFILE");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

inline bool Enabled() {
  return EnabledFlag().load(std::memory_order_relaxed);
}

// Named counters, in the order first used; leaked so that they outlive
// every thread that may still record into them at exit.
class Registry {
 public:
  static Registry& Get() {
    static Registry* r = new Registry();
    return *r;
  }
  Counter& Named(const std::string& name) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = index_.find(name);
    if (it != index_.end()) return *it->second;
    auto* c = new Counter();
    index_[name] = c;
    order_.push_back(name);
    return *c;
  }
  void Print() {
    std::lock_guard<std::mutex> l(mu_);
    Dl_info info{};
    std::string module = "this program";
    if (dladdr(reinterpret_cast<void*>(&Registry::Get), &info) != 0 &&
        info.dli_fname != nullptr) {
      module = info.dli_fname;
      const size_t slash = module.rfind('/');
      if (slash != std::string::npos) module = module.substr(slash + 1);
    }
    std::fprintf(stderr,
                 "ferry cuda profile (pid %d, %s): host time per driver call or stage\n"
                 "  %-34s %10s %12s %10s %10s %10s\n",
                 static_cast<int>(getpid()), module.c_str(), "", "calls", "total ms",
                 "mean us", "max us", "not ready");
    for (const std::string& name : order_) {
      const Counter& c = *index_[name];
      const uint64_t n = c.calls.load();
      if (n == 0) continue;
      const double total = static_cast<double>(c.total_ns.load());
      std::fprintf(stderr, "  %-34s %10llu %12.3f %10.2f %10.2f %10llu\n", name.c_str(),
                   static_cast<unsigned long long>(n), total / 1e6,
                   total / static_cast<double>(n) / 1e3,
                   static_cast<double>(c.max_ns.load()) / 1e3,
                   static_cast<unsigned long long>(c.not_ready.load()));
    }
  }

 private:
  std::mutex mu_;
  std::map<std::string, Counter*> index_;
  std::vector<std::string> order_;
};

inline uint64_t NsSince(Clock::time_point t0) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
}

// A stage a component times itself: Stage("cuda_ipc send to ACK").Add(ns).
// Look it up once (a static) where it is hot.
inline Counter& Stage(const char* name) {
  return Registry::Get().Named(name);
}

// The wrapper of one entry point: Timed<I, decltype(&::cuX)>::Call stands in
// for the driver's cuX, whose real address it keeps in `real`.
template <int I, typename F>
struct Timed;
template <int I, typename R, typename... A>
struct Timed<I, R (*)(A...)> {
  static inline R (*real)(A...) = nullptr;
  static inline Counter* counter = nullptr;
  static R Call(A... a) {
    const Clock::time_point t0 = Clock::now();
    const R r = real(a...);
    counter->Add(NsSince(t0), r == CUDA_ERROR_NOT_READY);
    return r;
  }
  template <typename P>
  static void Install(P* slot, const char* name) {
    real = *slot;
    counter = &Registry::Get().Named(name);
    *slot = &Call;
  }
};

// Replaces each member of `d` (a ferry_cuda::Driver) with its timed
// wrapper and prints the table at exit. Called once, by Driver::Open.
// One index per entry point, so each gets its own Timed<>.
enum EntryPoint : int {
#define FERRY_CUDA_PROFILE_INDEX(fn) kEntry_##fn,
  FERRY_CUDA_DRIVER_FUNCTIONS(FERRY_CUDA_PROFILE_INDEX)
#undef FERRY_CUDA_PROFILE_INDEX
};

template <typename D>
void Install(D* d) {
#define FERRY_CUDA_PROFILE_WRAP(fn) \
  Timed<kEntry_##fn, decltype(d->fn)>::Install(&d->fn, #fn);
  FERRY_CUDA_DRIVER_FUNCTIONS(FERRY_CUDA_PROFILE_WRAP)
#undef FERRY_CUDA_PROFILE_WRAP
  EnabledFlag().store(true);
  std::atexit([] { Registry::Get().Print(); });
}

}  // namespace profile
}  // namespace ferry_cuda
