// What every fuzz target here shares: its input read as a few bytes of
// choices and a sequence of frames (a u16 length, then that many bytes), so
// one input can drive a whole exchange; the same framing for the seed
// writer (make_seeds.cc); and FUZZ_CHECK, an invariant whose failure is a
// finding (libFuzzer saves the input that broke it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#define FUZZ_CHECK(cond)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: fuzz check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

namespace ferry_fuzz {

class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}

  bool empty() const { return p_ == end_; }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }

  // One byte of choice; 0 once the input is used up.
  uint8_t Byte() { return empty() ? 0 : *p_++; }

  // The next frame: a little-endian u16 length, then up to that many bytes
  // (fewer at the end of the input). Points into the input.
  std::string_view Frame() {
    const size_t len = size_t{Byte()} | size_t{Byte()} << 8;
    const size_t n = len < remaining() ? len : remaining();
    std::string_view f(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return f;
  }

  // Everything not read yet.
  std::string_view Rest() {
    std::string_view r(reinterpret_cast<const char*>(p_), remaining());
    p_ = end_;
    return r;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

// The writer's side of Input::Frame (make_seeds.cc).
inline void AppendFrame(std::vector<uint8_t>* out, const void* data, size_t len) {
  out->push_back(static_cast<uint8_t>(len & 0xff));
  out->push_back(static_cast<uint8_t>(len >> 8));
  const auto* p = static_cast<const uint8_t*>(data);
  out->insert(out->end(), p, p + len);
}

}  // namespace ferry_fuzz
