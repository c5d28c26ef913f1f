// The contract both ping-pong implementations (ferry over a plugin, and the
// raw TCP floor) honour, so that one measurement loop (measure.cc) times both
// in exactly the same way: the only difference between the two columns of the
// report is the code behind these interfaces.
#pragma once

#include "common/status.h"

#include <cstdint>

namespace ferry::bench {

// How a side waits when there is nothing to do. The same mode is applied to
// ferry and to the raw floor in one suite, so ratios compare like with like.
enum class PollMode {
  kBusy,   // spin: ferry spins on progress(), raw spins on non-blocking recv
  kSleep,  // block: ferry polls the plugin's wakeup fd, raw polls the socket
};

const char* PollModeName(PollMode mode);

// How hard a side worked, for the report's diagnostics: ferry counts
// progress() calls, raw counts send()/recv() calls; both count the times they
// blocked in poll() (sleep mode).
struct LoopCounters {
  uint64_t calls = 0;
  uint64_t waits = 0;
};

// The side that starts each exchange and owns the clock. Each call returns
// only when the exchange is complete, so the caller can time it.
class PingPongClient {
 public:
  virtual ~PingPongClient() = default;
  // Sends `size` bytes and returns once the peer's `size`-byte echo is in the
  // receive buffer (and the send buffer may be reused).
  virtual Status RoundTrip(uint64_t size) = 0;
  // Sends `count` messages of `size` bytes with at most `window` in flight,
  // then returns when the peer's acknowledgement of the last one arrived.
  virtual Status Stream(uint64_t size, uint32_t count, uint32_t window) = 0;
  virtual LoopCounters counters() const = 0;
};

// The echoing side, run in the peer process.
class PingPongServer {
 public:
  virtual ~PingPongServer() = default;
  // Receives one `size`-byte message and sends it back.
  virtual Status Echo(uint64_t size) = 0;
  // Receives `count` messages of `size` bytes into a ring of `window`
  // buffers, then sends one small acknowledgement.
  virtual Status StreamSink(uint64_t size, uint32_t count, uint32_t window) = 0;
  // Returns once everything posted has left: a transport may move bytes only
  // inside progress(), so the echoing side must keep driving it after its
  // last reply before it turns to the other implementation.
  virtual Status Flush() = 0;
};

}  // namespace ferry::bench
