// One posted send as the wire will carry it: the encoded prefix, segment
// table and copied header in `meta`, plus an iovec list that points at meta
// and at the caller's segments (never copied). Ops are recycled through a
// pool, so a steady stream of small sends allocates nothing.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <memory>
#include <vector>

namespace ferry_tcp {

// An op's iovecs: room inside the op for the usual few (meta plus up to
// three segments), so a small send touches no heap and initialises nothing
// it does not write; a heap array (kept while the op is pooled) beyond that.
class IovList {
 public:
  IovList() = default;
  IovList(const IovList&) = delete;  // data_ may point into this object
  IovList& operator=(const IovList&) = delete;

  size_t size() const { return size_; }
  iovec* data() { return data_; }
  iovec& operator[](size_t i) { return data_[i]; }
  void clear() { size_ = 0; }
  // Makes the list n entries long with unspecified contents, for the
  // caller to fill; returns the entries.
  iovec* Resize(size_t n) {
    if (n > capacity_) Grow(n, /*keep=*/false);
    size_ = n;
    return data_;
  }
  // Shortens the list to its first n entries.
  void Truncate(size_t n) {
    if (n < size_) size_ = n;
  }
  void push_back(const iovec& v) {
    if (size_ == capacity_) Grow(size_ + 1, /*keep=*/true);
    data_[size_++] = v;
  }
  // Drops a heap array that grew for an unusually long list.
  void ShrinkTo(size_t max_kept);

 private:
  static constexpr size_t kInline = 4;
  void Grow(size_t n, bool keep);

  iovec inline_[kInline];
  std::unique_ptr<iovec[]> heap_;
  iovec* data_ = inline_;
  size_t size_ = 0;
  size_t capacity_ = kInline;
};

struct SendOp {
  SendOp* next = nullptr;     // queue link
  void* user_data = nullptr;  // returned in FERRY_EV_SEND_DONE
  bool internal = false;      // the hello: completes without an event

  std::unique_ptr<char[]> meta;
  size_t meta_capacity = 0;

  // What is left to write: iov[iov_pos..] (the entry at iov_pos is advanced
  // in place after a partial write).
  IovList iov;
  size_t iov_pos = 0;

  // Makes `meta` hold at least n bytes (its old contents are dropped).
  char* ReserveMeta(size_t n) {
    if (meta_capacity < n) {
      // At least 1 KiB: room for a small message's segments too (they are
      // copied into it, see EncodeMessage).
      size_t cap = n < 1024 ? 1024 : n;
      meta.reset(new char[cap]);
      meta_capacity = cap;
    }
    return meta.get();
  }
  bool Written() const { return iov_pos == iov.size(); }
};

class SendOpPool {
 public:
  SendOpPool() = default;
  ~SendOpPool();
  SendOpPool(const SendOpPool&) = delete;
  SendOpPool& operator=(const SendOpPool&) = delete;

  SendOp* Get();
  void Put(SendOp* op);

 private:
  // Enough for a deep pipeline; beyond it ops are freed, not hoarded.
  static constexpr size_t kMaxPooled = 1024;
  // A meta buffer that grew for a huge header is not kept.
  static constexpr size_t kMaxPooledMeta = 16 * 1024;
  // Nor an iovec array that grew for a message with many segments.
  static constexpr size_t kMaxPooledIov = 64;
  std::vector<SendOp*> free_;
};

}  // namespace ferry_tcp
