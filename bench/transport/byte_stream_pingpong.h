// The benchmark's message pattern over a raw byte stream, shared by the raw
// floors (TCP socket, shared-memory ring): both sides know every size from
// the plan, so a message is just its bytes. The floor supplies
//   Status Send(const uint8_t* data, uint64_t size);   // all of it
//   Status Receive(uint8_t* data, uint64_t size);      // all of it
// and gets the ping-pong, echo and streaming loops. CRTP, not virtual
// calls: the floors are what ferry is measured against, so their loops
// stay as direct as hand-written ones.
#pragma once

#include "common/status.h"
#include "transport/buffers.h"
#include "transport/pingpong.h"

#include <algorithm>
#include <cstdint>

namespace ferry::bench {

template <typename Floor>
class ByteStreamPingPong : public PingPongClient, public PingPongServer {
 public:
  Status RoundTrip(uint64_t size) override {
    Status st = self().Send(buffers_->send->data(), size);
    if (!st.ok()) return st;
    return self().Receive(buffers_->recv[0]->data(), size);
  }

  Status Echo(uint64_t size) override {
    Status st = self().Receive(buffers_->recv[0]->data(), size);
    if (!st.ok()) return st;
    return self().Send(buffers_->reply->data(), size);
  }

  // The stream's own buffering (socket buffer, ring) is the raw window:
  // `window` has no meaning here, and writing back to back is the fastest
  // the sender can go. One byte back acknowledges the burst.
  Status Stream(uint64_t size, uint32_t count, uint32_t /*window*/) override {
    for (uint32_t i = 0; i < count; ++i) {
      Status st = self().Send(buffers_->send->data(), size);
      if (!st.ok()) return st;
    }
    uint8_t ack = 0;
    return self().Receive(&ack, 1);
  }

  Status StreamSink(uint64_t size, uint32_t count, uint32_t window) override {
    const size_t ring = std::min<size_t>(window, buffers_->recv.size());
    for (uint32_t i = 0; i < count; ++i) {
      Status st = self().Receive(buffers_->recv[i % ring]->data(), size);
      if (!st.ok()) return st;
    }
    const uint8_t ack = 1;
    return self().Send(&ack, 1);
  }

  // A completed Send is already in the kernel or the ring.
  Status Flush() override { return Status(); }

 protected:
  explicit ByteStreamPingPong(BufferSet* buffers) : buffers_(buffers) {}

  BufferSet* const buffers_;  // borrowed for the object's life

 private:
  Floor& self() { return static_cast<Floor&>(*this); }
};

}  // namespace ferry::bench
