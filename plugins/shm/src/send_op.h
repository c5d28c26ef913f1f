// One posted send, from send() until its FERRY_EV_SEND_DONE. Ops are pooled
// per connection (their vectors keep their capacity), so the steady state
// allocates nothing per message.
#pragma once

#include <ferry/transport.h>

#include <cstdint>
#include <vector>

namespace ferry_shm {

struct OutSegment {
  const uint8_t* data = nullptr;  // borrowed from the host until SEND_DONE
  uint64_t length = 0;
  ferry_device_t device{};
  uint32_t mode = 0;  // kSeg*, chosen when the record is written
};

struct SendOp {
  void* user_data = nullptr;
  // The header: the host's bytes during send(), else header_copy's.
  const uint8_t* header = nullptr;
  uint64_t header_len = 0;
  std::vector<uint8_t> header_copy;
  std::vector<OutSegment> segs;

  bool record_written = false;  // its message record is in the ring
  uint64_t msg_index = 0;       // its place in the stream of messages
  bool needs_ack = false;       // CMA segments: done when the peer read them
  // Ring-copied segments: the next byte to stream.
  uint32_t stream_seg = 0;
  uint64_t stream_off = 0;
  bool streamed = false;  // every ring-copied byte is in the ring

  void Reset() {
    user_data = nullptr;
    header = nullptr;
    header_len = 0;
    header_copy.clear();
    segs.clear();
    record_written = needs_ack = streamed = false;
    msg_index = 0;
    stream_seg = 0;
    stream_off = 0;
  }
};

}  // namespace ferry_shm
