// The ferry side of the benchmark: the same ping-pong as the raw floor, over
// a plugin loaded by the production loader and driven through
// ferry::Transport exactly the way the core drives it:
//  - one small header (16 bytes: sequence number and length, the size of a
//    minimal RPC header) plus one payload segment per message;
//  - arrivals are answered with place() into preallocated, reused,
//    pre-faulted buffers registered once with reg() where the plugin offers
//    it; inline (eager) segments are copied out and the arrival discarded,
//    as the ABI prescribes, once this side's next message has left (the
//    discard then overlaps that message's flight, off the round trip's
//    critical path; raw floor and fi_pingpong keep nothing to answer);
//  - busy mode spins on progress(); sleep mode calls progress() and, when it
//    returned nothing, blocks in poll() on the plugin's wakeup fd (or backs
//    off when the plugin has none, as the core does); a plugin's own spin
//    before sleeping (shm's spin_us) is turned off.
#pragma once

#include "common/status.h"
#include "loader/plugin_loader.h"
#include "transport/buffers.h"
#include "transport/pingpong.h"
#include "transport/transport.h"

#include <ferry/transport.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ferry::bench {

class FerryPingPong final : public PingPongClient, public PingPongServer {
 public:
  // Opens a context of `plugin` in `mode` (busy: FERRY_INIT_BUSY_POLL and the
  // plugin's busy_poll parameter set to 1; sleep: the parameter set to 0, so
  // an inherited FERRY_<PLUGIN>_BUSY_POLL cannot mislabel the run, and
  // spin_us to 0) and registers every buffer of `buffers` (borrowed for the
  // object's life).
  static StatusOr<std::unique_ptr<FerryPingPong>> Open(
      std::shared_ptr<const Plugin> plugin, PollMode mode, BufferSet* buffers);
  ~FerryPingPong() override;

  // Peer side: listen on `address` (plugin-defined; "" lets the plugin
  // pick), then accept the client's connection.
  StatusOr<std::string> Listen(const std::string& address);
  Status Accept(int timeout_ms);
  // Client side: connect and wait for FERRY_EV_CONNECTED.
  Status Connect(const std::string& address, int timeout_ms);
  // Closes the connection and waits for FERRY_EV_CLOSED.
  Status Close(int timeout_ms);

  const Transport& transport() const { return *transport_; }
  bool registered() const { return send_mr_ != nullptr || !recv_mr_.empty(); }

  Status RoundTrip(uint64_t size) override;
  Status Stream(uint64_t size, uint32_t count, uint32_t window) override;
  Status Echo(uint64_t size) override;
  Status StreamSink(uint64_t size, uint32_t count, uint32_t window) override;
  // A header-only end-of-run mark; the server's Flush drives progress()
  // until it arrives. SEND_DONE cannot tell the server that its last echo
  // left: over ofi_rxm, the fabric plugin's eager frames above rxm's buffer
  // size (16 KiB) complete first and leave on later progress() calls.
  Status EndRun() override;
  Status Flush() override;
  LoopCounters counters() const override { return counters_; }

 private:
  // What the benchmark keeps of a FERRY_EV_ARRIVAL until it answers it.
  struct Arrival {
    uint64_t msg_id = 0;
    uint64_t seq = 0;
    uint64_t length = 0;  // of the single segment (0 for header-only)
    uint32_t num_segments = 0;
    const void* inline_data = nullptr;  // borrowed until place/discard
  };

  FerryPingPong(std::unique_ptr<Transport> transport, PollMode mode, BufferSet* buffers);
  Status RegisterBuffers();
  // One progress() call and its events; in sleep mode, blocks on the wakeup
  // fd when progress() had nothing.
  Status Poll();
  Status Handle(const ferry_event_t& ev);
  // Queues a well-formed ARRIVAL (false, nothing queued, for Handle to
  // word what is wrong with it).
  bool TakeArrival(const ferry_event_t& ev);
  enum class ArrivalFault { kNone, kShortHeader, kLengthMismatch };
  // What an ARRIVAL says, into *a; *said_length is its header's length.
  static ArrivalFault ReadArrival(const ferry_event_t& ev, Arrival* a,
                                  uint64_t* said_length);
  void Sleep();
  // Posts one message: the header plus `size` bytes of `data` (no segment
  // when size is 0). UNAVAILABLE (back-pressure) is returned to the caller.
  Status PostSend(uint64_t seq, const uint8_t* data, uint64_t size, ferry_mr_t* mr);
  Status SendRetrying(uint64_t seq, const uint8_t* data, uint64_t size, ferry_mr_t* mr);
  Status WaitArrival(Arrival* out);
  // Discards the echo RoundTrip copied out and kept (if any).
  Status ReleaseHeldEcho();
  // DATA_LOSS unless `a` is one segment that fits recv[slot].
  Status CheckFits(const Arrival& a, uint32_t slot) const;
  // `a` is one inline segment that fits recv[slot] (CheckFits would pass).
  bool FitsInline(const Arrival& a, uint32_t slot) const {
    return a.inline_data != nullptr && a.num_segments == 1 &&
           a.length <= buffers_->recv[slot]->size();
  }
  // Copies an eager arrival's bytes into recv[slot]; the caller discards it.
  Status CopyInline(const Arrival& a, uint32_t slot);
  // Starts landing `a` in recv[slot]: inline bytes are copied and the arrival
  // discarded (*done = true); otherwise place() is posted and recv[slot]
  // stays busy until FERRY_EV_PLACE_DONE.
  Status Receive(const Arrival& a, uint32_t slot, bool* done);
  Status WaitSlotFree(uint32_t slot);
  Status WaitSendsDone();
  // OK while the connection is healthy (inline: it runs in every wait loop).
  Status CheckConn() const { return broken_.ok() ? Status() : BrokenError(); }
  Status BrokenError() const;

  std::unique_ptr<Transport> transport_;
  PollMode mode_;
  BufferSet* buffers_;
  ferry_mr_t* send_mr_ = nullptr;     // the client's send, the peer's reply buffer
  std::vector<ferry_mr_t*> recv_mr_;  // parallel to buffers_->recv, or empty
  ferry_listener_t* listener_ = nullptr;
  ferry_conn_t* conn_ = nullptr;
  bool connected_ = false;
  bool closed_ = false;
  bool closing_ = false;
  Status broken_;  // the FERRY_EV_CONN_BROKEN status, OK while healthy

  // Arrivals not yet taken, from arrivals_head_ on: a vector that is
  // emptied whenever it drains, so that a ping-pong (one at a time) keeps
  // using its first slot (a std::deque costs ~40 instructions more per
  // message, on the path the benchmark times).
  std::vector<Arrival> arrivals_;
  size_t arrivals_head_ = 0;
  uint64_t sends_posted_ = 0;
  uint64_t sends_done_ = 0;
  std::vector<uint8_t> slot_busy_;  // a place() into recv[i] is in flight
  uint64_t next_seq_ = 0;
  // RoundTrip's last inline echo (its msg_id): copied out, answered by
  // ReleaseHeldEcho.
  std::optional<uint64_t> held_echo_;
  IdleBackoff backoff_;  // sleep mode without a wakeup fd
  LoopCounters counters_;
  std::array<ferry_event_t, 16> events_{};
};

}  // namespace ferry::bench
