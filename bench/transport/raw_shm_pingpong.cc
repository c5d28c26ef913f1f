#include "transport/raw_shm_pingpong.h"

#include "ferry_support/cpu_relax.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

namespace ferry::bench {
namespace raw_shm {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "futex words are the low halves of 64-bit indices");

constexpr uint64_t kMagic = 0x7761722d79727265;  // "erry-raw"
constexpr uint64_t kLine = 64;
// The shm plugin's defaults (ring_size 2M, chunk_size ring/8), so the floor
// pipelines large messages the way the plugin's ring-copy path does.
constexpr uint64_t kRingSize = 2ull << 20;
constexpr uint64_t kChunk = kRingSize / 8;

// One cache line with a single writer.
struct alignas(kLine) Line {
  uint64_t value;
};

// One direction. Each pair of lines (the adjacent-line prefetcher moves
// 128 bytes) is written by one side only.
struct alignas(2 * kLine) RingControl {
  Line head;              // producer: bytes published (futex word)
  Line producer_waiting;  // producer: 1 while it may sleep on `tail`
  Line tail;              // consumer: bytes consumed (futex word)
  Line consumer_waiting;  // consumer: 1 while it may sleep on `head`
};

struct Header {
  Line magic;        // peer, before the address is published
  Line ring_size;    // peer, likewise
  Line peer_pid;     // peer, likewise
  Line client_pid;   // client, before `attached`
  Line attached;     // client: 0 -> 1 (futex word)
  RingControl up;    // client -> peer
  RingControl down;  // peer -> client
};

constexpr uint64_t kDataOffset = 4096;
static_assert(sizeof(Header) <= kDataOffset, "header spills into the rings");
constexpr uint64_t kMapSize = kDataOffset + 2 * kRingSize;

uint64_t Load(const uint64_t* word) {
  return __atomic_load_n(word, __ATOMIC_ACQUIRE);
}
void Store(uint64_t* word, uint64_t v) {
  __atomic_store_n(word, v, __ATOMIC_RELEASE);
}
uint32_t* FutexWord(const uint64_t* word) {
  return reinterpret_cast<uint32_t*>(const_cast<uint64_t*>(word));
}
long Futex(uint32_t* word, int op, uint32_t value, const timespec* timeout) {
  // Not FUTEX_PRIVATE_FLAG: the word is shared between two processes.
  return syscall(SYS_futex, word, op, value, timeout, nullptr, 0);
}

uint64_t RoundUpToLine(uint64_t n) {
  return (n + kLine - 1) & ~(kLine - 1);
}

// Copies into (out of) the ring at stream position `at`, wrapping at the end.
void CopyIn(uint8_t* ring, uint64_t at, const uint8_t* src, uint64_t n) {
  const uint64_t offset = at & (kRingSize - 1);
  const uint64_t first = std::min(n, kRingSize - offset);
  std::memcpy(ring + offset, src, first);
  if (first < n) std::memcpy(ring, src + first, n - first);
}
void CopyOut(uint8_t* dst, const uint8_t* ring, uint64_t at, uint64_t n) {
  const uint64_t offset = at & (kRingSize - 1);
  const uint64_t first = std::min(n, kRingSize - offset);
  std::memcpy(dst, ring + offset, first);
  if (first < n) std::memcpy(dst + first, ring, n - first);
}

Status Errno(const std::string& what) {
  return Status(FERRY_UNKNOWN, "raw shm: " + what + ": " + std::strerror(errno));
}

// False once `pid` has exited, even while it is an unreaped zombie (the
// client is the peer's parent and reaps it only at the end).
bool ProcessAlive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  const char state = line[paren + 2];
  return state != 'Z' && state != 'X';
}

}  // namespace raw_shm

using namespace raw_shm;

namespace {

// A spinning waiter checks that its peer still lives every this many spins
// (a few hundred milliseconds), a sleeping one after every futex timeout.
constexpr uint32_t kSpinsPerLivenessCheck = 1u << 22;
constexpr long kFutexTimeoutNs = 100 * 1000 * 1000;

}  // namespace

RawShmPingPong::RawShmPingPong(PollMode mode, BufferSet* buffers, void* base,
                               bool is_client)
    : ByteStreamPingPong(buffers),
      mode_(mode),
      base_(base),
      header_(static_cast<Header*>(base)) {
  uint8_t* up = static_cast<uint8_t*>(base) + kDataOffset;
  uint8_t* down = up + kRingSize;
  if (is_client) {
    tx_ = {&header_->up, up, 0, 0};
    rx_ = {&header_->down, down, 0, 0};
  } else {
    tx_ = {&header_->down, down, 0, 0};
    rx_ = {&header_->up, up, 0, 0};
  }
}

RawShmPingPong::~RawShmPingPong() {
  if (memfd_ >= 0) close(memfd_);
  munmap(base_, kMapSize);
}

StatusOr<std::unique_ptr<RawShmPingPong>> RawShmPingPong::Create(PollMode mode,
                                                                 BufferSet* buffers) {
  const int fd = memfd_create("ferry-bench-raw-shm", MFD_CLOEXEC);
  if (fd < 0) return Errno("memfd_create");
  if (ftruncate(fd, static_cast<off_t>(kMapSize)) != 0) {
    Status st = Errno("ftruncate");
    close(fd);
    return st;
  }
  void* base = mmap(nullptr, kMapSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    Status st = Errno("mmap");
    close(fd);
    return st;
  }
  // Touch every page now: page faults belong to set-up, not to the timed
  // loop (the client maps with MAP_POPULATE for the same reason).
  std::memset(base, 0, kMapSize);
  std::unique_ptr<RawShmPingPong> pp(
      new RawShmPingPong(mode, buffers, base, /*is_client=*/false));
  pp->memfd_ = fd;
  pp->header_->ring_size.value = kRingSize;
  pp->header_->peer_pid.value = static_cast<uint64_t>(getpid());
  Store(&pp->header_->magic.value, kMagic);
  pp->address_ = "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(fd);
  return pp;
}

StatusOr<std::unique_ptr<RawShmPingPong>> RawShmPingPong::Attach(
    const std::string& address, PollMode mode, BufferSet* buffers) {
  const int fd = open(address.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return Errno("open " + address);
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != kMapSize) {
    close(fd);
    return Status(FERRY_INVALID_ARGUMENT,
                  "raw shm: " + address + " is not the peer's mapping");
  }
  void* base =
      mmap(nullptr, kMapSize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  close(fd);  // the mapping keeps the pages
  if (base == MAP_FAILED) return Errno("mmap " + address);
  std::unique_ptr<RawShmPingPong> pp(
      new RawShmPingPong(mode, buffers, base, /*is_client=*/true));
  Header* h = pp->header_;
  if (Load(&h->magic.value) != kMagic || h->ring_size.value != kRingSize) {
    return Status(FERRY_INVALID_ARGUMENT,
                  "raw shm: " + address + " has no raw-shm header");
  }
  pp->peer_pid_ = static_cast<pid_t>(h->peer_pid.value);
  h->client_pid.value = static_cast<uint64_t>(getpid());
  Store(&h->attached.value, 1);
  Futex(FutexWord(&h->attached.value), FUTEX_WAKE, 1, nullptr);
  return pp;
}

Status RawShmPingPong::WaitAttached(int timeout_ms) {
  const timespec timeout{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
  if (Load(&header_->attached.value) == 0) {
    Futex(FutexWord(&header_->attached.value), FUTEX_WAIT, 0, &timeout);
  }
  if (Load(&header_->attached.value) == 0) {
    return Status(FERRY_DEADLINE_EXCEEDED, "raw shm: the client did not map " + address_ +
                                               " within " + std::to_string(timeout_ms) +
                                               " ms");
  }
  peer_pid_ = static_cast<pid_t>(header_->client_pid.value);
  close(memfd_);
  memfd_ = -1;
  return Status();
}

Status RawShmPingPong::CheckPeerAlive() {
  if (ProcessAlive(peer_pid_)) return Status();
  return Status(FERRY_PEER_GONE, "raw shm: the other process (pid " +
                                     std::to_string(peer_pid_) + ") exited");
}

Status RawShmPingPong::WaitChange(const uint64_t* word, uint64_t seen, uint64_t* flag) {
  if (mode_ == PollMode::kBusy) {
    for (uint32_t spins = 1; Load(word) == seen; ++spins) {
      ferry_support::CpuRelax();
      if (spins % kSpinsPerLivenessCheck == 0) {
        Status st = CheckPeerAlive();
        if (!st.ok()) return st;
      }
    }
    return Status();
  }
  // Raise the flag, then look again (the seq_cst store is a full fence):
  // either the other side's fence-then-check sees the flag and wakes us, or
  // this load sees its new value. futex_wait also returns at once if the
  // word moved in between.
  __atomic_store_n(flag, 1, __ATOMIC_SEQ_CST);
  Status st;
  while (__atomic_load_n(word, __ATOMIC_SEQ_CST) == seen) {
    ++counters_.waits;
    const timespec timeout{0, kFutexTimeoutNs};
    if (Futex(FutexWord(word), FUTEX_WAIT, static_cast<uint32_t>(seen), &timeout) != 0 &&
        errno == ETIMEDOUT) {
      st = CheckPeerAlive();
      if (!st.ok()) break;
    }
  }
  __atomic_store_n(flag, 0, __ATOMIC_RELAXED);
  return st;
}

void RawShmPingPong::WakeIfWaiting(const uint64_t* word, const uint64_t* flag) {
  // The other half of WaitChange's handshake; busy mode never sleeps, so it
  // pays neither the fence nor the flag's cache line.
  if (mode_ == PollMode::kBusy) return;
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (__atomic_load_n(flag, __ATOMIC_RELAXED) != 0) {
    Futex(FutexWord(word), FUTEX_WAKE, 1, nullptr);
  }
}

// Every message starts on a cache line: the writer skips to the next line
// boundary after a message's last byte, and so does the reader. Positions
// inside a message stay line-aligned too (chunks and the ring are multiples
// of a line), so the skip never overruns the free space.
Status RawShmPingPong::Send(const uint8_t* src, uint64_t size) {
  RingControl* c = tx_.control;
  while (size > 0) {
    uint64_t free_bytes = kRingSize - (tx_.position - tx_.other);
    if (free_bytes < std::min(size, kChunk)) {
      tx_.other = Load(&c->tail.value);
      free_bytes = kRingSize - (tx_.position - tx_.other);
      if (free_bytes == 0) {
        Status st = WaitChange(&c->tail.value, tx_.other, &c->producer_waiting.value);
        if (!st.ok()) return st;
        continue;
      }
    }
    const uint64_t n = std::min({size, free_bytes, kChunk});
    CopyIn(tx_.data, tx_.position, src, n);
    src += n;
    size -= n;
    tx_.position += n;
    if (size == 0) tx_.position = RoundUpToLine(tx_.position);
    Store(&c->head.value, tx_.position);
    ++counters_.calls;
    WakeIfWaiting(&c->head.value, &c->consumer_waiting.value);
  }
  return Status();
}

Status RawShmPingPong::Receive(uint8_t* dst, uint64_t size) {
  RingControl* c = rx_.control;
  while (size > 0) {
    if (rx_.other == rx_.position) {
      rx_.other = Load(&c->head.value);
      if (rx_.other == rx_.position) {
        Status st = WaitChange(&c->head.value, rx_.position, &c->consumer_waiting.value);
        if (!st.ok()) return st;
        continue;
      }
    }
    const uint64_t n = std::min({size, rx_.other - rx_.position, kChunk});
    CopyOut(dst, rx_.data, rx_.position, n);
    dst += n;
    size -= n;
    rx_.position += n;
    if (size == 0) rx_.position = RoundUpToLine(rx_.position);
    Store(&c->tail.value, rx_.position);
    ++counters_.calls;
    WakeIfWaiting(&c->tail.value, &c->producer_waiting.value);
  }
  return Status();
}

// --------------------------------------------------------------------------
// As a reference of the benchmark.
// --------------------------------------------------------------------------
namespace {

const ReferenceInfo kRawShmInfo = {
    "raw", "raw shm ring",
    "one memfd mapped by both processes, a 2 MiB byte ring per direction "
    "(256 KiB chunks, the shm plugin's defaults); the sender memcpy()s the "
    "message into the ring and publishes its head, the receiver memcpy()s "
    "it out into the destination buffer and publishes its tail; no framing; "
    "busy: spin on the index; sleep: waiting flag + futex"};

class RawShmReference final : public Reference {
 public:
  const ReferenceInfo& info() const override { return kRawShmInfo; }
  StatusOr<std::unique_ptr<ReferenceListener>> Listen(PollMode mode,
                                                      BufferSet* buffers) override {
    auto pp = RawShmPingPong::Create(mode, buffers);
    if (!pp.ok()) return pp.status();
    return std::unique_ptr<ReferenceListener>(
        new SelfAcceptingListener<RawShmPingPong, &RawShmPingPong::WaitAttached>(
            std::move(pp).value()));
  }
  StatusOr<std::unique_ptr<PingPongClient>> Connect(const std::string& address,
                                                    PollMode mode,
                                                    BufferSet* buffers) override {
    auto pp = RawShmPingPong::Attach(address, mode, buffers);
    if (!pp.ok()) return pp.status();
    return std::unique_ptr<PingPongClient>(std::move(pp).value());
  }
};

}  // namespace

std::unique_ptr<Reference> MakeRawShmReference() {
  return std::make_unique<RawShmReference>();
}

}  // namespace ferry::bench
