#include "placement.h"

#include <algorithm>
#include <cstring>

namespace ferry_tcp {

void Placement::Clear() {
  targets_.clear();
  next_ = 0;
  remaining_ = 0;
  total_ = 0;
}

void Placement::AddTarget(char* dest, uint64_t length) {
  if (length == 0) return;
  targets_.push_back(Target{dest, length});
  remaining_ += length;
  total_ += length;
}

size_t Placement::TakeBuffered(const char* data, size_t size) {
  size_t taken = 0;
  while (next_ < targets_.size() && taken < size) {
    Target& t = targets_[next_];
    size_t n = static_cast<size_t>(std::min<uint64_t>(t.left, size - taken));
    if (t.dest != nullptr) {
      std::memcpy(t.dest, data + taken, n);
      t.dest += n;
    }
    t.left -= n;
    taken += n;
    if (t.left == 0) ++next_;
  }
  remaining_ -= taken;
  return taken;
}

size_t Placement::BuildIov(iovec* iov, size_t max_iov, char* scratch, size_t scratch_size,
                           bool* covers_rest) const {
  size_t count = 0;
  *covers_rest = false;
  for (size_t i = next_; i < targets_.size(); ++i) {
    const Target& t = targets_[i];
    if (t.dest != nullptr) {
      if (count == max_iov) return count;
      iov[count++] = iovec{t.dest, static_cast<size_t>(t.left)};
      continue;
    }
    // Dropped bytes: point several entries at the same scratch buffer so one
    // readv() skips up to max_iov * scratch_size bytes.
    uint64_t left = t.left;
    while (left > 0) {
      if (count == max_iov) return count;
      size_t n = static_cast<size_t>(std::min<uint64_t>(left, scratch_size));
      iov[count++] = iovec{scratch, n};
      left -= n;
    }
  }
  *covers_rest = true;
  return count;
}

size_t Placement::Advance(size_t n) {
  size_t used = 0;
  while (next_ < targets_.size() && used < n) {
    Target& t = targets_[next_];
    size_t k = static_cast<size_t>(std::min<uint64_t>(t.left, n - used));
    if (t.dest != nullptr) t.dest += k;
    t.left -= k;
    used += k;
    if (t.left == 0) ++next_;
  }
  remaining_ -= used;
  return used;
}

}  // namespace ferry_tcp
