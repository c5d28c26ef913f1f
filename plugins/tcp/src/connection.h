// One TCP connection: its socket, its send queue and its receive state
// machine. Every method runs with the context lock held.
//
// Lifecycle (state_):
//   kConnecting --connect completes--> kOpen --EOF/reset/bad frame--> kBroken
//        |                               |                              |
//        +--connect fails--> kBroken     +--------- host close() -------+--> kClosed
// kBroken keeps the handle (and an arrival the host still holds) until the
// host's close(); kClosed emits FERRY_EV_CLOSED, after which the context
// frees the object once the event has been returned.
//
// Receive side (rx_state_):
//   kHello -> kFrame -> kHeld -> (answer) -> kPlacing -> kFrame ...
//   kFrame:   reading the next message's prefix, table, header and inline
//             segments into the receive buffer.
//   kHeld:    FERRY_EV_ARRIVAL is out; the socket is not read until the host
//             answers with place() or discard(). That pause is the
//             back-pressure: the kernel buffers fill and the peer's sends
//             stay pending.
//   kPlacing: reading the non-inline bytes into the placed buffers (or
//             dropping them), then FERRY_EV_PLACE_DONE.
//   kDead:    nothing more will be read.
#pragma once

#include "frame_parser.h"
#include "message_encoder.h"
#include "placement.h"
#include "pollable.h"
#include "rx_buffer.h"
#include "status.h"
#include "tx_queue.h"

#include <ferry/transport.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ferry_tcp {

class Context;

class Conn final : public Pollable {
 public:
  enum class State : uint8_t { kConnecting, kOpen, kBroken, kClosed };

  // Takes ownership of `fd`, already registered with the context's epoll.
  // An accepted connection starts with reading disabled until the host has
  // seen FERRY_EV_ACCEPTED (see OnAcceptDelivered).
  Conn(Context* ctx, int fd, State state, std::string peer, void* user_data,
       bool accepted);
  ~Conn() override;

  Context* context() const { return ctx_; }
  const std::string& peer() const { return peer_; }
  void* user_data() const { return user_data_; }
  void set_user_data(void* user_data) { user_data_ = user_data; }

  // --- host calls -------------------------------------------------------
  // Each returns FERRY_OK, or a failure with *error filled in.
  ferry_status_t Send(const ferry_send_args_t& args, Status* error);
  ferry_status_t Place(const ferry_place_args_t& args, Status* error);
  ferry_status_t Discard(uint64_t msg_id, Status* error);
  void Close();

  // --- context calls ----------------------------------------------------
  void OnEpoll(uint32_t events) override;
  // Flushes pending sends and reads what can be read. Scheduled by events
  // and host answers; reschedules itself when it stopped for fairness.
  void Service();
  // Busy-poll mode: try the socket directly instead of waiting for epoll.
  void PrimeForBusyPoll();
  // Queues the hello as the first bytes of an established stream.
  void StartStream();
  // A connect() that failed before it was even in flight.
  void FailConnect(int err);
  void OnAcceptDelivered();
  int fd() const { return fd_; }
  // Writes what Context::Cork held back (busy-poll mode, see Send).
  void FlushCorked();

  // Context bookkeeping (owned by Context).
  bool scheduled = false;
  bool corked = false;  // in Context::corked_: sends held for progress()
  size_t open_index = SIZE_MAX;
  size_t spun_index = SIZE_MAX;  // in Context::spun_: read directly, not in epoll

 private:
  enum class RxState : uint8_t { kHello, kFrame, kHeld, kPlacing, kDead };

  void FinishConnect(uint32_t events);
  void UpdateSendLimits();
  void FlushTx();
  void CompleteSend(SendOp* op, ferry_status_t status, const std::string& msg);
  void FailAllSends(ferry_status_t status, const std::string& msg);
  // Breaks the connection: pending sends and placement fail with `status`,
  // then FERRY_EV_CONN_BROKEN (or FERRY_EV_CONNECTED while connecting).
  void Fail(ferry_status_t status, const std::string& message);
  void FailOnEof();
  // Closes the socket (and leaves the open set). `drain` reads what is
  // already buffered first, so the kernel ends with FIN, not RST.
  void ReleaseSocket(bool drain);

  void ServiceRx(size_t* budget);
  bool ParseHelloFromBuffer(size_t* need);
  bool ParseMessageFromBuffer(size_t* need);
  // Reads more bytes so that `need` are buffered; false when nothing more
  // can be read now (EAGAIN, EOF, error, budget).
  bool ReadMore(size_t need, size_t* budget);
  // Continues the placement; false when it must wait for the socket.
  bool ContinuePlacement(size_t* budget);
  void FinishPlacement(ferry_status_t status, const std::string& message);
  // After a read that returned less than asked for.
  void NoteShortRead();
  // Answering the held arrival: drops its bytes from the receive buffer.
  void ReleaseArrival();
  void ScheduleIfRxWork();
  Status NoArrivalError(uint64_t msg_id) const;
  Status UnusableError(const char* what) const;

  Context* ctx_;
  uint64_t write_epoch_ = 0;  // Context::progress_epoch() of the last direct write
  int fd_;
  State state_;
  std::string peer_;
  void* user_data_;
  void* connect_user_data_;

  // Send side.
  TxQueue tx_;
  bool tx_blocked_ = false;  // waiting for EPOLLOUT

  // The peer's receive limits, from its hello (floors until then), and
  // what they make of this side's sends (kept current by UpdateSendLimits).
  wire::Hello peer_limits_;
  SendLimits send_limits_;

  // Receive side.
  RxState rx_state_ = RxState::kHello;
  bool rx_enabled_;
  bool rx_ready_ = false;        // the socket may have bytes (edge seen, no EAGAIN)
  bool peer_shut_down_ = false;  // EPOLLRDHUP seen: EOF is coming
  // PrimeForBusyPoll's recv() found the end of the stream (-1) or an error
  // (its errno), for ReadMore() to report as if its own recv() had.
  int deferred_rx_result_ = 0;
  // How many bytes a read asks for beyond what the parser needs (see
  // kReadAhead in receive.cc).
  size_t read_ahead_ = 4096;
  RxBuffer rx_;
  ParsedMessage arrival_;
  std::vector<ferry_arrival_segment_t> arrival_segments_;
  uint64_t arrival_id_ = 0;
  uint64_t next_msg_id_ = 1;
  Placement placement_;
  bool placing_for_host_ = false;  // place() (emits PLACE_DONE), not discard()
  void* place_user_data_ = nullptr;

  // Why the connection broke (kBroken).
  ferry_status_t broken_status_ = FERRY_OK;
  std::string broken_message_;
};

}  // namespace ferry_tcp
