#include "segment.h"

#include "shared_atomic.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ferry_shm {
namespace {

constexpr unsigned kRequiredSeals = F_SEAL_SHRINK;

uint64_t RandomNonce() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, GRND_NONBLOCK) != sizeof v) {
    v = static_cast<uint64_t>(getpid()) * 0x9E3779B97F4A7C15ull ^
        reinterpret_cast<uintptr_t>(&v);
  }
  return v;
}

}  // namespace

Segment::~Segment() {
  Unmap();
  CloseFd();
}

void Segment::CloseFd() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

void Segment::Unmap() {
  if (base_ != nullptr) munmap(base_, map_len_);
  base_ = nullptr;
}

Status Segment::Create(uint64_t ring_size, uint32_t role) {
  const uint64_t len = kRingOffset + ring_size;
  int fd = memfd_create("ferry-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return ErrnoError(FERRY_UNAVAILABLE, errno, "shm: memfd_create");
  if (ftruncate(fd, static_cast<off_t>(len)) != 0) {
    int e = errno;
    close(fd);
    return ErrnoError(FERRY_RESOURCE_EXHAUSTED, e,
                      Format("shm: sizing a %llu-byte segment", (unsigned long long)len));
  }
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    int e = errno;
    close(fd);
    return ErrnoError(FERRY_INTERNAL, e, "shm: sealing the segment");
  }
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd);
    return ErrnoError(FERRY_RESOURCE_EXHAUSTED, e, "shm: mapping the segment");
  }
  fd_ = fd;
  base_ = static_cast<uint8_t*>(p);
  map_len_ = len;
  ring_size_ = ring_size;
  SegmentHeader* h = &control()->header;
  h->wire_version = kWireVersion;
  h->role = role;
  h->ring_offset = kRingOffset;
  h->ring_size = ring_size;
  h->creator_pid = static_cast<int32_t>(getpid());
  h->nonce = RandomNonce();
  // Position 0 must not look like a record before the first one.
  StoreRelaxed(&reinterpret_cast<RecordHeader*>(ring())->seq, kNoRecord);
  StoreRelease(&h->magic, kSegmentMagic);
  return Status();
}

Status Segment::MapPeer(int fd, uint64_t ring_size) {
  fd_ = fd;
  const uint64_t len = kRingOffset + ring_size;
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (static_cast<unsigned>(seals) & kRequiredSeals) != kRequiredSeals) {
    return Error(FERRY_PERMISSION_DENIED,
                 "shm: the peer's segment is not a memfd sealed against "
                 "shrinking (seals %d): refusing to map it",
                 seals);
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != len) {
    return Error(FERRY_DATA_LOSS,
                 "shm: the peer's segment is %lld bytes, its handshake "
                 "announced %llu",
                 (long long)st.st_size, (unsigned long long)len);
  }
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    return ErrnoError(FERRY_RESOURCE_EXHAUSTED, errno, "shm: mapping the peer's segment");
  }
  base_ = static_cast<uint8_t*>(p);
  map_len_ = len;
  ring_size_ = ring_size;
  CloseFd();
  const SegmentHeader* h = &control()->header;
  if (LoadAcquire(&h->magic) != kSegmentMagic || h->wire_version != kWireVersion ||
      h->ring_offset != kRingOffset || h->ring_size != ring_size) {
    return Error(FERRY_DATA_LOSS,
                 "shm: the peer's segment header does not match its handshake "
                 "(magic %llx, version %u, ring %llu bytes at %llu)",
                 (unsigned long long)h->magic, h->wire_version,
                 (unsigned long long)h->ring_size, (unsigned long long)h->ring_offset);
  }
  return Status();
}

}  // namespace ferry_shm
