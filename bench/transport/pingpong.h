// The contract every ping-pong implementation (ferry over a plugin, and each
// reference: the raw TCP floor, the raw libfabric floor) honours, so that one
// measurement loop (measure.cc) times them all in exactly the same way: the
// only difference between the columns of the report is the code behind these
// interfaces.
#pragma once

#include "common/status.h"

#include <time.h>

#include <algorithm>
#include <cstdint>
#include <string>

namespace ferry::bench {

// How a side waits when there is nothing to do. The same mode is applied to
// ferry and to every reference in one suite, so ratios compare like with like.
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

// Sleep mode without a wait object (libfabric's shm provider has none): the
// core's back-off, shared by ferry's loop and the raw libfabric floor so they
// stay in step. Spins for 64 empty polls, then sleeps 1 us doubling to 1 ms.
class IdleBackoff {
 public:
  void Reset() { idle_polls_ = 0; }
  // After an empty poll.
  void Wait(LoopCounters* counters) {
    if (++idle_polls_ < 64) return;
    ++counters->waits;
    const long ns =
        std::min<long>(1000000L, 1000L << std::min<uint32_t>(idle_polls_ - 64, 10));
    timespec ts{0, ns};
    nanosleep(&ts, nullptr);
  }

 private:
  uint32_t idle_polls_ = 0;
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
  // Untimed, after each run of round trips and each stream: tells the
  // server that the last echo (or the stream's acknowledgement) is in, for
  // an implementation whose server cannot know that by itself (see Flush).
  virtual Status EndRun() { return Status(); }
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
  // last reply before it turns to the other implementation. Where a send
  // can complete before its bytes have left (libfabric's ofi_rxm completes
  // a message larger than its buffers that way), only the client knows:
  // then Flush waits for the client's EndRun, driving the transport.
  virtual Status Flush() = 0;
};

// A reference that runs its own timing loop in another program (libfabric's
// fi_pingpong): it cannot be timed round trip by round trip, only asked for
// the mean of a batch. The measurement loop runs it in a few batches per
// size, between the round-trip rounds of the others, and compares their
// pooled mean with the others' loop means (measure.h).
struct BatchResult {
  uint32_t iters = 0;      // timed round trips
  double mean_rtt_ns = 0;  // mean round trip over them; NaN when the run
                           // could not tell (with the reason in `note`)
  std::string method;      // how the mean was obtained (for the JSON)
  std::string note;        // why there is no figure, or ""
};

class BatchPingPongClient {
 public:
  virtual ~BatchPingPongClient() = default;
  // `warmup` untimed round trips, then `iters` timed ones, of `size` bytes.
  // The client decides the counts and tells its server. `share`: this
  // batch's part of the size's batches (1 / their number), for a reference
  // that stretches short batches to a minimum duration.
  virtual Status Run(uint64_t size, uint32_t warmup, uint32_t iters, double share,
                     BatchResult* out) = 0;
};

class BatchPingPongServer {
 public:
  virtual ~BatchPingPongServer() = default;
  // The echoing half of the client's Run for `size`, with the counts the
  // client sends.
  virtual Status Serve(uint64_t size) = 0;
};

}  // namespace ferry::bench
