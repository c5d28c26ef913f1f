// ferry::receive_buffers (receive_buffers.h): a bounded cache of mapped,
// pre-faulted buffers by size class.
#include "engine/receive_buffers.h"

#include "common/log.h"

#include <sys/mman.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL
#endif

namespace ferry::receive_buffers {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

// Four classes per doubling: 1, 1.25, 1.5 and 1.75 times a power of two.
size_t ClassSize(size_t n) {
  size_t p = kPooledMin;
  while (p <= n / 2) p *= 2;
  const size_t step = p / 4;
  return (n + step - 1) / step * step;
}

// A whole number from the environment, or `fallback` (with a warning
// saying what was wrong and how to turn the feature off) when it is not one.
unsigned long long NumberFromEnvironment(const char* name, unsigned long long fallback,
                                         const char* unit, const char* off) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (end == v || *end != '\0' || *v == '-') {
    FERRY_LOG(FERRY_LOG_WARN, "receive-buffers",
              std::string(name) + "='" + v + "' is not a whole number of " + unit +
                  "; using the default " + std::to_string(fallback) + " (" + off + ")");
    return fallback;
  }
  return n;
}

size_t LimitFromEnvironment() {
  return static_cast<size_t>(NumberFromEnvironment("FERRY_RECEIVE_POOL_MB", 256, "MiB",
                                                   "set 0 to turn the pool off"))
         << 20;
}

// Maps `bytes` aligned to a huge page, so that the kernel can back it with
// transparent huge pages (a fault per 2 MiB instead of per 4 KiB, and fewer
// pages for a CMA transfer to pin), and faults it in with one call.
void* Map(size_t bytes) {
  const size_t span = bytes + kHugePage;
  void* raw =
      mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) & ~(uintptr_t{kHugePage} - 1);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = start + span;
  if (end > aligned + bytes) {
    munmap(reinterpret_cast<void*>(aligned + bytes), end - (aligned + bytes));
  }
  void* p = reinterpret_cast<void*>(aligned);
  (void)madvise(p, bytes, MADV_HUGEPAGE);        // advice: fine if refused
  (void)madvise(p, bytes, MADV_POPULATE_WRITE);  // else first touch faults
  return p;
}

class Pool {
 public:
  static Pool& Get() {
    // Never destroyed: tensors may be released during static destruction.
    static Pool* pool = new Pool();
    return *pool;
  }

  void* Take(size_t cls) {
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = free_.find(cls);
      if (it != free_.end() && !it->second.empty()) {
        // The last released first: the likeliest to be in cache; the oldest
        // stay at the front, for TrimIdle().
        void* p = it->second.back().p;
        it->second.pop_back();
        cached_ -= cls;
        ++reused_;
        return p;
      }
      ++mapped_;
    }
    return Map(cls);
  }

  void Give(void* p, size_t cls) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (cached_ + cls <= limit_) {
        free_[cls].push_back(Cached{p, std::chrono::steady_clock::now()});
        cached_ += cls;
        return;
      }
    }
    munmap(p, cls);
  }

  Stats GetStats() {
    std::lock_guard<std::mutex> l(mu_);
    return Stats{reused_, mapped_, cached_, limit_};
  }

  size_t TrimIdle(std::chrono::steady_clock::duration idle) {
    const auto cutoff = std::chrono::steady_clock::now() - idle;
    std::vector<std::pair<void*, size_t>> unmap;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto& [cls, list] : free_) {
        size_t n = 0;
        while (n < list.size() && list[n].since <= cutoff) {
          unmap.emplace_back(list[n].p, cls);
          ++n;
        }
        list.erase(list.begin(), list.begin() + static_cast<long>(n));
        cached_ -= n * cls;
      }
    }
    size_t bytes = 0;
    for (auto& [p, cls] : unmap) {
      munmap(p, cls);  // outside the lock: unmapping 64 MiB takes a while
      bytes += cls;
    }
    return bytes;
  }

  bool enabled() const { return limit_ > 0; }

 private:
  Pool() : limit_(LimitFromEnvironment()) {}

  struct Cached {
    void* p;
    std::chrono::steady_clock::time_point since;  // when it was released
  };
  const size_t limit_;
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<Cached>> free_;  // oldest first
  size_t cached_ = 0;
  uint64_t reused_ = 0;
  uint64_t mapped_ = 0;
};

bool Pooled(size_t n) {
  return n >= kPooledMin && Pool::Get().enabled();
}

}  // namespace

void* Allocate(size_t n) {
  if (Pooled(n)) return Pool::Get().Take(ClassSize(n));
  // aligned_alloc needs a size that is a multiple of the alignment.
  const size_t rounded = (n + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void Release(void* p, size_t n) {
  if (p == nullptr) return;
  if (Pooled(n)) {
    Pool::Get().Give(p, ClassSize(n));
  } else {
    std::free(p);
  }
}

Stats GetStats() {
  return Pool::Get().GetStats();
}

void Trim() {
  Pool::Get().TrimIdle(std::chrono::steady_clock::duration::zero());
}

size_t TrimIdle(std::chrono::steady_clock::duration idle) {
  return Pool::Get().TrimIdle(idle);
}

std::chrono::seconds IdleTimeFromEnvironment() {
  static const std::chrono::seconds idle(
      static_cast<long>(NumberFromEnvironment("FERRY_RECEIVE_POOL_IDLE_S", 30, "seconds",
                                              "set 0 to keep cached buffers for good")));
  return idle;
}

}  // namespace ferry::receive_buffers
