// Where the non-inline bytes of one arriving message go, in wire order, and
// how far they got. A target with a NULL destination drops its bytes (the
// host said so, or discard()ed the message). Bytes already sitting in the
// receive buffer are copied; the rest is read by readv() straight into the
// host's buffers, so a large tensor is never staged.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ferry_tcp {

class Placement {
 public:
  void Clear();
  // Appends the next non-inline segment: `dest` (NULL = drop), `length`.
  void AddTarget(char* dest, uint64_t length);

  bool Done() const { return remaining_ == 0; }
  uint64_t remaining() const { return remaining_; }
  uint64_t total() const { return total_; }

  // Copies (or skips) up to `size` buffered bytes; returns how many it took.
  size_t TakeBuffered(const char* data, size_t size);

  // Fills `iov` (at most max_iov entries) to continue with readv(). Dropped
  // bytes land in `scratch` (reused as often as needed). *covers_rest is
  // true when the entries cover every remaining byte, so the caller may
  // append its receive buffer to read the next message in the same call.
  size_t BuildIov(iovec* iov, size_t max_iov, char* scratch, size_t scratch_size,
                  bool* covers_rest) const;

  // Accounts for `n` bytes read through BuildIov's entries; returns how many
  // belonged to this placement (the rest went past it).
  size_t Advance(size_t n);

 private:
  struct Target {
    char* dest;     // next byte's destination, NULL when dropping
    uint64_t left;  // bytes still to come for this segment
  };
  std::vector<Target> targets_;
  size_t next_ = 0;  // first target with bytes left
  uint64_t remaining_ = 0;
  uint64_t total_ = 0;
};

}  // namespace ferry_tcp
