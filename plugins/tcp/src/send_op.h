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

struct SendOp {
  SendOp* next = nullptr;    // queue link
  void* user_data = nullptr; // returned in FERRY_EV_SEND_DONE
  bool internal = false;     // the hello: completes without an event

  std::unique_ptr<char[]> meta;
  size_t meta_capacity = 0;

  // What is left to write: iov[iov_pos..] (the entry at iov_pos is advanced
  // in place after a partial write).
  std::vector<iovec> iov;
  size_t iov_pos = 0;

  // Makes `meta` hold at least n bytes (its old contents are dropped).
  char* ReserveMeta(size_t n) {
    if (meta_capacity < n) {
      size_t cap = n < 512 ? 512 : n;
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
  std::vector<SendOp*> free_;
};

}  // namespace ferry_tcp
