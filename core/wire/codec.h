// The core's wire codec: little-endian fixed-width integers and
// length-prefixed byte strings, written into a growing buffer and read back
// with every length checked against what actually arrived. Nothing read from
// the wire is trusted: a Reader that runs past its end stops, remembers the
// failure, and returns zeros from then on, so decoders check ok() once at the
// end instead of after every field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::wire {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the wire is little-endian; add byte swaps for this host");

class Writer {
 public:
  // Messages are built field by field: start with room for a typical one
  // (a request or response body, an envelope) so that appending does not
  // reallocate six or seven times on the way to its size.
  explicit Writer(std::vector<uint8_t>* out) : out_(out) {
    if (out_->capacity() < kInitialCapacity) out_->reserve(kInitialCapacity);
  }
  static constexpr size_t kInitialCapacity = 128;

  void U8(uint8_t v) { out_->push_back(v); }
  void U16(uint16_t v) { Raw(&v, sizeof v); }
  void U32(uint32_t v) { Raw(&v, sizeof v); }
  void U64(uint64_t v) { Raw(&v, sizeof v); }
  void I32(int32_t v) { Raw(&v, sizeof v); }
  // u32 length, then the bytes.
  void Bytes(const void* data, size_t len) {
    U32(static_cast<uint32_t>(len));
    Raw(data, len);
  }
  void Str(std::string_view s) { Bytes(s.data(), s.size()); }
  void Raw(const void* data, size_t len) {
    // insert(), not resize() + memcpy(): resize value-initialises the new
    // bytes through an out-of-line call per field, which would dominate the
    // cost of encoding a small request.
    const auto* p = static_cast<const uint8_t*>(data);
    out_->insert(out_->end(), p, p + len);
  }
  size_t size() const { return out_->size(); }

 private:
  std::vector<uint8_t>* out_;
};

// Fixed-width fields gathered on the stack and appended to a Writer in one
// piece (when it goes out of scope, or at Flush). Appending field by field
// costs an out-of-line vector insert each (~50 instructions), so the
// messages on every call's path, a dozen fields each, batch theirs. The bytes are exactly
// the Writer's; only the number of appends changes.
class Fields {
 public:
  explicit Fields(Writer& w) : w_(w) {}
  ~Fields() { Flush(); }
  Fields(const Fields&) = delete;
  Fields& operator=(const Fields&) = delete;

  void U8(uint8_t v) { Put(&v, sizeof v); }
  void U16(uint16_t v) { Put(&v, sizeof v); }
  void U32(uint32_t v) { Put(&v, sizeof v); }
  void U64(uint64_t v) { Put(&v, sizeof v); }
  void I32(int32_t v) { Put(&v, sizeof v); }
  // A short byte string (u32 length, then the bytes) joins the batch; a
  // long one is flushed past it.
  void Bytes(const void* data, size_t len) {
    U32(static_cast<uint32_t>(len));
    if (len <= kShortBytes) {
      Put(data, len);
    } else {
      Flush();
      w_.Raw(data, len);
    }
  }
  void Str(std::string_view s) { Bytes(s.data(), s.size()); }
  void Flush() {
    if (n_ > 0) w_.Raw(buf_, n_);
    n_ = 0;
  }

 private:
  static constexpr size_t kShortBytes = 64;
  void Put(const void* data, size_t len) {
    if (n_ + len > sizeof buf_) Flush();
    std::memcpy(buf_ + n_, data, len);
    n_ += len;
  }
  Writer& w_;
  size_t n_ = 0;
  uint8_t buf_[128];
};

class Reader {
 public:
  Reader(const void* data, size_t len)
      : p_(static_cast<const uint8_t*>(data)), end_(p_ + len) {}

  bool ok() const { return ok_; }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }

  uint8_t U8() {
    uint8_t v = 0;
    Raw(&v, sizeof v);
    return v;
  }
  uint16_t U16() {
    uint16_t v = 0;
    Raw(&v, sizeof v);
    return v;
  }
  uint32_t U32() {
    uint32_t v = 0;
    Raw(&v, sizeof v);
    return v;
  }
  uint64_t U64() {
    uint64_t v = 0;
    Raw(&v, sizeof v);
    return v;
  }
  int32_t I32() {
    int32_t v = 0;
    Raw(&v, sizeof v);
    return v;
  }
  // A length-prefixed string of at most `max_len` bytes (longer: failure).
  std::string Str(size_t max_len = 1 << 20) {
    std::string_view v = BytesView(max_len);
    return std::string(v);
  }
  // A view into the reader's buffer: valid as long as that buffer is.
  std::string_view BytesView(size_t max_len = SIZE_MAX) {
    const uint32_t len = U32();
    if (!ok_ || len > max_len || len > remaining()) {
      Fail();
      return {};
    }
    std::string_view v(reinterpret_cast<const char*>(p_), len);
    p_ += len;
    return v;
  }
  void Raw(void* out, size_t len) {
    if (!ok_ || len > remaining()) {
      Fail();
      std::memset(out, 0, len);
      return;
    }
    std::memcpy(out, p_, len);
    p_ += len;
  }
  // A count that will size an allocation: each element needs at least
  // `min_element_bytes` on the wire, so a count the remaining bytes cannot
  // hold is a lie and fails here, before anything is allocated.
  uint32_t Count(size_t min_element_bytes) {
    const uint32_t n = U32();
    if (ok_ && min_element_bytes > 0 && n > remaining() / min_element_bytes) {
      Fail();
      return 0;
    }
    return ok_ ? n : 0;
  }
  void Fail() {
    ok_ = false;
    p_ = end_;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
  bool ok_ = true;
};

}  // namespace ferry::wire
