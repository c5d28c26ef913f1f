// The raw floor: the same ping-pong as ferry's, written directly on a TCP
// socket, with nothing a transport could leave out. Non-blocking socket with
// TCP_NODELAY (like every latency-minded transport), kernel-default buffer
// sizes (autotuning on), no framing (both sides know each size from the
// plan), one send()/recv() loop per message. Busy mode spins on the
// non-blocking calls; sleep mode blocks in poll() on EAGAIN. It moves the
// same bytes between the same pre-faulted buffers as the ferry side.
#pragma once

#include "common/status.h"
#include "transport/buffers.h"
#include "transport/byte_stream_pingpong.h"
#include "transport/reference.h"

#include <cstdint>
#include <memory>
#include <string>

namespace ferry::bench {

// A TCP listener on 127.0.0.1, port chosen by the kernel.
class RawTcpListener {
 public:
  static StatusOr<std::unique_ptr<RawTcpListener>> Open();
  ~RawTcpListener();
  const std::string& address() const { return address_; }  // "127.0.0.1:N"
  // Accepts one connection (waiting at most timeout_ms) and returns its fd,
  // configured like RawTcpConnect's.
  StatusOr<int> Accept(int timeout_ms);

 private:
  RawTcpListener(int fd, std::string address) : fd_(fd), address_(std::move(address)) {}
  int fd_;
  std::string address_;
};

// Connects to "host:port" and returns a non-blocking, TCP_NODELAY socket.
StatusOr<int> RawTcpConnect(const std::string& address);

class RawTcpPingPong final : public ByteStreamPingPong<RawTcpPingPong> {
 public:
  // Takes ownership of `fd`; `buffers` is borrowed for the object's life.
  RawTcpPingPong(int fd, PollMode mode, BufferSet* buffers);
  ~RawTcpPingPong() override;

  // The byte stream (byte_stream_pingpong.h): send()/recv() loops.
  Status Send(const uint8_t* data, uint64_t size);
  Status Receive(uint8_t* data, uint64_t size);
  LoopCounters counters() const override { return counters_; }

 private:
  // EAGAIN: spin (busy) or poll() for `events` (sleep).
  Status WaitFor(short events);

  int fd_;
  PollMode mode_;
  LoopCounters counters_;
};

// The raw TCP floor as a reference of the benchmark (reference.h).
std::unique_ptr<Reference> MakeRawTcpReference();

}  // namespace ferry::bench
