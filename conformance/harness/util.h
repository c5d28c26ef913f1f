// Small helpers shared by the conformance harness: the testkit's byte
// patterns (a receiver checks a payload without keeping a copy), canary
// bytes (to prove a callee "writes only within its own size"), a buffer that
// faults on the first byte past its end, and fd accounting.
#pragma once

#include "testkit/event.h"
#include "testkit/pattern.h"

#include <ferry/transport.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <set>
#include <string>
#include <vector>

namespace ferry::conformance {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// The bound for any single operation to complete. Generous on purpose: it
// detects hangs, it is not a performance assertion.
constexpr milliseconds kOpTimeout{10000};
// The bound for a call that must return at once (listen, connect, ...).
constexpr milliseconds kCallBound{1000};

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * 1024;

using testkit::FillPattern;
using testkit::PatternMismatch;

constexpr unsigned char kCanary = 0xA5;
void FillCanary(void* p, size_t len);
// Offset of the first byte in [p, p+len) that is no longer the canary, or -1.
int64_t CanaryDamage(const void* p, size_t len);

// A T at the start of a buffer `extra` bytes larger than sizeof(T), the
// extra bytes holding canaries: what a newer host's bigger struct looks like
// to an older callee. The callee must accept the larger struct_size and must
// not write into the extra bytes.
template <typename T>
class Padded {
 public:
  explicit Padded(size_t extra = 64) : buf_(sizeof(T) + extra) {
    new (buf_.data()) T{};
    FillCanary(buf_.data() + sizeof(T), extra);
    get()->struct_size = static_cast<uint32_t>(buf_.size());
  }
  T* get() { return reinterpret_cast<T*>(buf_.data()); }
  T* operator->() { return get(); }
  uint32_t size() const { return static_cast<uint32_t>(buf_.size()); }
  // -1 when the canaries after sizeof(T) are intact, else the damaged offset.
  int64_t TailDamage() const {
    int64_t off = CanaryDamage(buf_.data() + sizeof(T), buf_.size() - sizeof(T));
    return off < 0 ? -1 : off + static_cast<int64_t>(sizeof(T));
  }

 private:
  std::vector<unsigned char> buf_;  // operator new: 16-byte aligned
};

// `size` usable bytes that end exactly at an inaccessible page: a callee that
// reads or writes one byte past the end faults at once instead of silently
// reading garbage.
class GuardedBuffer {
 public:
  explicit GuardedBuffer(size_t size);
  ~GuardedBuffer();
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;
  unsigned char* data() { return data_; }
  size_t size() const { return size_; }

 private:
  void* map_ = nullptr;
  size_t map_len_ = 0;
  unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

// The file descriptors open in this process right now (/proc/self/fd).
std::set<int> OpenFds();

using testkit::StatusText;  // "PEER_GONE (100)"

// Milliseconds since `start`.
inline int64_t ElapsedMs(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
}

// Human-readable byte count: "64 MiB", "4097 B".
std::string Bytes(uint64_t n);

}  // namespace ferry::conformance
