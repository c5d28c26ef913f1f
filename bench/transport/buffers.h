// Page-aligned, pre-faulted message buffers, allocated once per process and
// shared by the ferry and raw ping-pongs. A real core sends from and places
// into buffers it already owns (pools registered once); allocating or
// first-touching pages inside the timed loop would measure the page-fault
// handler instead of the transport, and would favour whichever side ran
// second.
#pragma once

#include "common/status.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace ferry::bench {

class Buffer {
 public:
  // mmap()s `size` bytes (rounded up to a page) and writes every page, so no
  // page fault happens later. `fill` seeds a byte pattern (i * 131 + fill).
  static StatusOr<std::unique_ptr<Buffer>> Allocate(uint64_t size, uint8_t fill);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  Buffer(uint8_t* data, uint64_t size, uint64_t mapped)
      : data_(data), size_(size), mapped_(mapped) {}
  uint8_t* data_;
  uint64_t size_;
  uint64_t mapped_;
};

// What one process sends from and receives into. The client sends from
// `send` and receives into recv[0]. The peer receives each request into
// recv[0] and answers from `reply`, its own buffer holding the same bytes
// as the client's `send`, as fabtests' fi_pingpong and OSU's latency test
// answer from a send buffer of their own. (Sending back the buffer just
// received into would make every reply read lines the receive just wrote:
// when the two CPUs share no cache, a different and much slower traffic
// pattern from the reference's at large sizes.) The client checks that each reply arrived
// intact and the peer checks each request (measure.cc).
struct BufferSet {
  std::unique_ptr<Buffer> send;               // client only (else null)
  std::unique_ptr<Buffer> reply;              // peer only (else null)
  std::vector<std::unique_ptr<Buffer>> recv;  // ring; recv[0] always present
};

// The byte pattern seed of the client's `send` and the peer's `reply`.
constexpr uint8_t kMessageFill = 7;

// The client's buffers: one send buffer (patterned) and one receive buffer.
StatusOr<BufferSet> AllocateClientBuffers(uint64_t max_size);
// The peer's reply buffer and its ring: `ring` receive buffers of
// `max_size` bytes each (a ring of one when no streaming test runs).
StatusOr<BufferSet> AllocatePeerBuffers(uint64_t max_size, uint32_t ring);

}  // namespace ferry::bench
