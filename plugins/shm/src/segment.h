// A connection's shared segments (layout: shm_layout.h). Each side creates
// its own sending segment as a memfd: anonymous memory with no name in
// /dev/shm, so nothing outlives the processes that map it, even after a
// crash. The fd is sealed against shrinking before it is passed, so the peer
// can never make our mapping fault (SIGBUS) by truncating it; a peer's fd is
// mapped only after the same check.
#pragma once

#include "shm_layout.h"
#include "status.h"

#include <cstdint>

namespace ferry_shm {

class Segment {
 public:
  Segment() = default;
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // Creates, seals and maps a new segment with a ring of `ring_size` bytes
  // and initializes its header and ring. fd() is kept for passing.
  Status Create(uint64_t ring_size, uint32_t role);
  // Maps the peer's segment `fd` (taking ownership of it) after checking
  // that it is a memfd sealed against shrinking, of the size the peer
  // announced, with a matching header. The fd is closed once mapped.
  Status MapPeer(int fd, uint64_t ring_size);

  // Closes the fd (after it was passed); the mapping stays.
  void CloseFd();
  void Unmap();

  int fd() const { return fd_; }
  SegmentControl* control() const { return reinterpret_cast<SegmentControl*>(base_); }
  uint8_t* ring() const { return base_ + kRingOffset; }
  uint64_t ring_size() const { return ring_size_; }

 private:
  int fd_ = -1;
  uint8_t* base_ = nullptr;
  uint64_t map_len_ = 0;
  uint64_t ring_size_ = 0;
};

}  // namespace ferry_shm
