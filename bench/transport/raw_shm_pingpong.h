// The raw shared-memory floor: the same ping-pong as ferry's, written
// directly on one shared mapping, with nothing a transport could leave out.
//
// The peer creates a memfd (nothing named in /dev/shm, so nothing is left
// behind by a crash) and publishes it as "/proc/<pid>/fd/<fd>"; the client
// opens that path and maps the same pages. The mapping holds one byte ring
// per direction, the same size and chunking as the shm plugin's defaults
// (2 MiB, 256 KiB chunks): the sender copies a message into the ring and
// publishes its new head, the receiver copies it out into the destination
// buffer and publishes its new tail. No framing (both sides know each size
// from the plan), no records, no events: one copy in, one copy out, and a
// head and a tail on cache lines of their own.
//
//  - busy mode: the receiver spins on the producer's head (and a full ring's
//    producer on the consumer's tail); nobody writes anything else.
//  - sleep mode: a waiter raises its `waiting` flag, fences, looks once more
//    and sleeps in futex_wait on the word it waits for; the other side
//    fences after publishing and calls futex_wake only when the flag is up
//    (a Dekker handshake: no lost wake-ups, no syscall when nobody sleeps).
#pragma once

#include "common/status.h"
#include "transport/buffers.h"
#include "transport/byte_stream_pingpong.h"
#include "transport/reference.h"

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

namespace ferry::bench {

namespace raw_shm {
struct Header;
struct RingControl;
}  // namespace raw_shm

class RawShmPingPong final : public ByteStreamPingPong<RawShmPingPong> {
 public:
  // Peer side: creates and pre-faults the mapping.
  static StatusOr<std::unique_ptr<RawShmPingPong>> Create(PollMode mode,
                                                          BufferSet* buffers);
  // Client side: maps the peer's memfd at `address` and says so.
  static StatusOr<std::unique_ptr<RawShmPingPong>> Attach(const std::string& address,
                                                          PollMode mode,
                                                          BufferSet* buffers);
  ~RawShmPingPong() override;
  RawShmPingPong(const RawShmPingPong&) = delete;
  RawShmPingPong& operator=(const RawShmPingPong&) = delete;

  // Peer side: "/proc/<pid>/fd/<fd>" of the memfd, until WaitAttached.
  const std::string& address() const { return address_; }
  // Peer side: waits for the client's Attach, then closes the memfd (the
  // mappings keep the pages).
  Status WaitAttached(int timeout_ms);

  // The byte stream (byte_stream_pingpong.h): through the rings.
  Status Send(const uint8_t* src, uint64_t size);
  Status Receive(uint8_t* dst, uint64_t size);
  LoopCounters counters() const override { return counters_; }

 private:
  // This process's view of one direction's ring.
  struct RingEnd {
    raw_shm::RingControl* control = nullptr;
    uint8_t* data = nullptr;
    uint64_t position = 0;  // our own head (producer) or tail (consumer)
    uint64_t other = 0;     // the last value seen of the other side's index
  };

  RawShmPingPong(PollMode mode, BufferSet* buffers, void* base, bool is_client);
  // Blocks until the word at `word` differs from `seen` (busy: spin; sleep:
  // the waiting-flag handshake and futex_wait). OK when it changed.
  Status WaitChange(const uint64_t* word, uint64_t seen, uint64_t* flag);
  void WakeIfWaiting(const uint64_t* word, const uint64_t* flag);
  Status CheckPeerAlive();

  PollMode mode_;
  void* base_;  // the whole mapping, owned: munmap()ed by the destructor
  raw_shm::Header* header_;
  int memfd_ = -1;  // peer only, until attached
  pid_t peer_pid_ = 0;
  std::string address_;
  RingEnd tx_, rx_;
  LoopCounters counters_;
};

std::unique_ptr<Reference> MakeRawShmReference();

}  // namespace ferry::bench
