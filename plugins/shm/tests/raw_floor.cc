#include "raw_floor.h"

#include "ferry_support/cpu_relax.h"

#include <time.h>

#include <algorithm>
#include <cstring>
#include <memory>

namespace ferry_shm_test {
namespace {

constexpr uint64_t kRing = 2u << 20;
constexpr uint64_t kChunk = 256u << 10;
constexpr uint64_t kMaxMessage = 1ull << 30;

struct alignas(64) Word {
  uint64_t v;
};

struct Slot {
  alignas(64) unsigned char payload[kRawSlotMax];
  Word seq;
};

struct Ring {
  Word head;
  Word tail;
  alignas(64) unsigned char data[kRing];
};

struct Region {
  Word gen;   // parent bumps it to start a series
  Word mode;  // 1 slot, 2 ring, 3 stop
  Word size;
  Word iters;
  Word base;         // sequence numbers of this series start after it
  Word iters_total;  // parent only: the previous series' length
  Word done_gen;     // child: last series finished
  Slot up, down;     // parent -> child, child -> parent
  Ring rup, rdown;
};

uint64_t Load(const Word& w) {
  return __atomic_load_n(&w.v, __ATOMIC_ACQUIRE);
}
void Store(Word& w, uint64_t v) {
  __atomic_store_n(&w.v, v, __ATOMIC_RELEASE);
}

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull +
         static_cast<uint64_t>(ts.tv_nsec);
}

void RingWrite(Ring& r, const unsigned char* src, uint64_t n) {
  uint64_t head = r.head.v;  // only we write it
  for (uint64_t off = 0; off < n;) {
    const uint64_t c = std::min(kChunk, n - off);
    while (head + c - Load(r.tail) > kRing) ferry_support::CpuRelax();
    const uint64_t at = head % kRing;
    const uint64_t first = std::min(c, kRing - at);
    std::memcpy(r.data + at, src + off, first);
    std::memcpy(r.data, src + off + first, c - first);
    head += c;
    off += c;
    Store(r.head, head);
  }
}

void RingRead(Ring& r, unsigned char* dst, uint64_t n) {
  uint64_t tail = r.tail.v;
  for (uint64_t off = 0; off < n;) {
    uint64_t avail;
    while ((avail = Load(r.head) - tail) == 0) ferry_support::CpuRelax();
    const uint64_t c = std::min(avail, n - off);
    const uint64_t at = tail % kRing;
    const uint64_t first = std::min(c, kRing - at);
    std::memcpy(dst + off, r.data + at, first);
    std::memcpy(dst + off + first, r.data, c - first);
    tail += c;
    off += c;
    Store(r.tail, tail);
  }
}

}  // namespace

size_t RawRegionSize() {
  return sizeof(Region);
}

void RawServe(void* region) {
  Region& r = *static_cast<Region*>(region);
  std::unique_ptr<unsigned char[]> buf;
  uint64_t buf_size = 0;
  uint64_t seen = 0;
  for (;;) {
    uint64_t g;
    while ((g = Load(r.gen)) == seen) ferry_support::CpuRelax();
    seen = g;
    const uint64_t mode = Load(r.mode), size = Load(r.size), iters = Load(r.iters);
    const uint64_t base = Load(r.base);
    if (mode == 3 || size > kMaxMessage) return;
    if (size > buf_size) {
      buf.reset(new unsigned char[size]);
      buf_size = size;
    }
    for (uint64_t i = base + 1; i <= base + iters; ++i) {
      if (mode == 1) {
        while (Load(r.up.seq) != i) ferry_support::CpuRelax();
        std::memcpy(buf.get(), r.up.payload, size);
        std::memcpy(r.down.payload, buf.get(), size);
        Store(r.down.seq, i);
      } else {
        RingRead(r.rup, buf.get(), size);
        RingWrite(r.rdown, buf.get(), size);
      }
    }
    Store(r.done_gen, g);
  }
}

std::vector<double> RawPingPong(void* region, uint64_t size, int iters) {
  Region& r = *static_cast<Region*>(region);
  std::vector<unsigned char> src(std::max<uint64_t>(size, 1), 0x5a), dst(src.size());
  Store(r.mode, size <= kRawSlotMax ? 1 : 2);
  Store(r.size, size);
  Store(r.iters, static_cast<uint64_t>(iters));
  const uint64_t base = Load(r.base) + Load(r.iters_total);
  Store(r.base, base);
  Store(r.iters_total, static_cast<uint64_t>(iters));
  const uint64_t g = Load(r.gen) + 1;
  Store(r.gen, g);
  std::vector<double> rtt;
  rtt.reserve(static_cast<size_t>(iters));
  for (uint64_t i = base + 1; i <= base + static_cast<uint64_t>(iters); ++i) {
    const uint64_t t0 = NowNs();
    if (size <= kRawSlotMax) {
      std::memcpy(r.up.payload, src.data(), size);
      Store(r.up.seq, i);
      while (Load(r.down.seq) != i) ferry_support::CpuRelax();
      std::memcpy(dst.data(), r.down.payload, size);
    } else {
      RingWrite(r.rup, src.data(), size);
      RingRead(r.rdown, dst.data(), size);
    }
    rtt.push_back(static_cast<double>(NowNs() - t0));
  }
  while (Load(r.done_gen) != g) ferry_support::CpuRelax();
  return rtt;
}

void RawStop(void* region) {
  Region& r = *static_cast<Region*>(region);
  Store(r.mode, 3);
  Store(r.gen, Load(r.gen) + 1);
}

}  // namespace ferry_shm_test
