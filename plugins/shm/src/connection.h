// One shm connection: two rings in shared memory (ours to send, the peer's
// to receive), two doorbells, and the set-up socket that also reports the
// peer's death.
//
// Life: set-up (connect, HELLO/READY over the socket: connection_setup.cc) ->
// established (send: send.cc, receive: receive.cc) -> maybe broken (the
// peer went away, or its ring is corrupt) -> closed by the host (connection.cc).
//
// Threading: the host may call Send/Place/Discard/Close/SetUserData from any
// thread while one thread runs progress() (FERRY_CAP_THREAD_SAFE). A mutex
// per connection serialises them. It is uncontended in the common case (one
// thread drives a connection) and never held across a blocking call, and a
// connection's lock is never taken while another lock is held, so there is
// no lock order to get wrong. Events are produced only inside progress();
// a host call that creates work for progress() kicks the context, which
// makes the wakeup fd readable if progress() may be asleep.
#pragma once

#include "doorbell.h"
#include "event_sink.h"
#include "fifo.h"
#include "message_record.h"
#include "pollable.h"
#include "ring.h"
#include "segment.h"
#include "send_op.h"
#include "status.h"

#include "ferry_plugin/mutex.h"

#include <ferry/transport.h>

#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ferry_shm {

class Context;
struct Config;

class Conn {
 public:
  // connect(): starts a non-blocking connect to `path`. Failures to reach
  // the peer are reported by FERRY_EV_CONNECTED, not here.
  static Conn* NewOutbound(Context* ctx, const std::string& path, void* user_data);
  // An accepted socket whose peer passed the SO_PEERCRED check.
  static Conn* NewInbound(Context* ctx, int fd, const ucred& cred,
                          const std::string& listener_path, void* listener_user_data,
                          std::shared_ptr<std::atomic<bool>> listener_open);
  ~Conn();
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  ferry_conn_t* handle() { return reinterpret_cast<ferry_conn_t*>(this); }
  static Conn* From(ferry_conn_t* c) { return reinterpret_cast<Conn*>(c); }

  // --- host calls (any thread) --------------------------------------------
  Status Send(const ferry_send_args_t* args);
  Status Place(const ferry_place_args_t* args);
  Status Discard(uint64_t msg_id);
  void Close();
  void SetUserData(void* user_data) {
    user_data_.store(user_data, std::memory_order_release);
  }
  Status PeerAddress(char* buf, uint64_t buf_len);

  // Counts host calls in flight, so the context frees a closed connection
  // only once no call can still be inside it.
  void EnterCall() { calls_.fetch_add(1, std::memory_order_acq_rel); }
  void LeaveCall() { calls_.fetch_sub(1, std::memory_order_acq_rel); }
  bool InCall() const { return calls_.load(std::memory_order_acquire) != 0; }

  // --- progress() (the progress thread) -----------------------------------
  enum class Step { kIdle, kWorked, kDead };
  // Everything the connection can do now: set-up, sending, completions,
  // receiving, closing. kDead: it is finished (CLOSED returned, or an
  // unreported inbound connection failed); the context retires it.
  Step Progress(EventSink* sink);
  // epoll reported the set-up socket readable (handshake, or EOF).
  void OnSocketEvent(EventSink* sink);
  // epoll reported our doorbell: reset it.
  void DrainDoorbell() { bell_.Drain(); }
  // The doorbell protocol (doorbell.h): Arm before re-checking HasWork.
  void Arm();
  void Disarm();
  // True when progress() would find something to do now (with the
  // doorbells armed: the idle check before sleeping).
  bool HasWork();
  // In set-up (the context then watches its sockets on every progress()).
  bool InSetup() const {
    return state_ == State::kConnecting || state_ == State::kHandshake;
  }

 private:
  enum class State {
    kConnecting,  // socket connect pending (backlog full) or failing
    kHandshake,   // HELLO/READY exchange
    kEstablished,
    kFailed,  // set-up failed: CONNECTED carried the error
  };
  enum class Rx { kIdle, kHeld, kPlacing, kSkipping };

  Conn(Context* ctx, bool outbound, const std::string& path);
  const Config& config() const;

  // connection_setup.cc
  void BeginConnect(void* user_data);
  void StepSetup(EventSink* sink);
  Status SetupOnce(bool* finished);
  Status CreateOwnSide();
  Status OnHello(const void* buf, size_t len, const int* fds, int nfds);
  void Established(EventSink* sink);
  void FailSetup(EventSink* sink, const Status& why);

  // send.cc
  bool WriteInlineMessage(const ferry_send_args_t* a, uint64_t inline_padded);
  bool PumpTx(Status* st);
  bool WriteMessage(SendOp* op, Status* st);
  bool WriteChunk(SendOp* op, Status* st);
  bool ReapSends(EventSink* sink, Status* st);
  bool AckedBeyond(uint64_t msg_index, Status* st);
  SendOp* NewOp();
  void RecycleOp(SendOp* op);
  void FailSends(EventSink* sink, ferry_status_t code, const std::string& why);
  bool TxHasWork();

  // receive.cc
  bool StepRx(EventSink* sink, Status* st);
  bool ParseMessage(const RecordView& v, Status* st);
  void EmitArrival(EventSink* sink);
  bool ContinueMessage(EventSink* sink, Status* st, bool* worked);
  void ReadCma(uint64_t budget);
  void FinishMessage(EventSink* sink);
  void StopArrivals(EventSink* sink);
  bool RxHasWork();

  // connection.cc
  void OnPeerGone(EventSink* sink, const std::string& why);
  void Break(EventSink* sink, const Status& why);
  void Finalize(EventSink* sink);
  void ReleaseResources();
  void CloseSocket();
  Status RefuseIfUnusable() const;
  void Emit(EventSink* sink, int32_t type, ferry_status_t status, void* user_data) {
    sink->Emit(EventSink::Make(type, status, handle(), user_data,
                               user_data_.load(std::memory_order_acquire)),
               &user_data_);
  }
  void Emit(EventSink* sink, int32_t type, ferry_status_t status, void* user_data,
            const std::string& message);

  Context* const ctx_;
  const bool outbound_;
  const std::string path_;  // outbound: the address; inbound: the listener's
  ferry_plugin::Mutex mu_;  // ferry_plugin/mutex.h: the hot path's lock
  // Set by the host from any thread, read where events are made: the
  // pointer is published with release, read with acquire.
  std::atomic<void*> user_data_{nullptr};
  std::atomic<int> calls_{0};

  // --- set-up -------------------------------------------------------------
  State state_ = State::kConnecting;
  void* connect_user_data_ = nullptr;
  void* listener_user_data_ = nullptr;
  std::shared_ptr<std::atomic<bool>> listener_open_;
  Status pending_failure_;  // a connect error to report at progress()
  bool reported_ = false;   // CONNECTED / ACCEPTED was emitted
  bool counted_in_setup_ = false;
  uint64_t deadline_ns_ = 0;
  int sock_ = -1;
  Pollable sock_poll_{Pollable::kConnSocket, this};
  Pollable bell_poll_{Pollable::kDoorbell, this};
  bool bell_registered_ = false;
  ucred peer_{};
  bool hello_sent_ = false, hello_received_ = false, ready_sent_ = false;
  uint64_t probe_word_ = 0;  // read by the peer's CMA probe
  std::string cma_note_;     // why CMA is off, for logs

  // --- shared memory ------------------------------------------------------
  Segment tx_seg_;  // ours: we produce into its ring
  Segment rx_seg_;  // the peer's: we consume from its ring
  Doorbell bell_;
  RingWriter writer_;
  RingReader reader_;
  bool cma_send_ = false;  // the peer reads our big segments with CMA
  bool armed_ = false;

  // --- lifecycle ----------------------------------------------------------
  bool closing_ = false;           // the host called close()
  Status broken_;                  // why the connection broke (code != OK)
  bool peer_gone_ = false;         // EOF: receive what is complete, then stop
  bool arrivals_stopped_ = false;  // CONN_BROKEN emitted, no more arrivals

  // --- sending (send.cc) -----------------------------------------------
  // The fast path: a message whose segments all go inline, posted while
  // nothing else is queued, is written into the ring inside send() and
  // needs no SendOp; only its user data waits here for SEND_DONE. Each of
  // these was posted before every op in ops_ (send() takes the fast path
  // only while ops_ is empty), so reporting them first keeps posting order.
  Fifo<void*> written_sends_;
  Fifo<SendOp*> ops_;  // posted, in order, until SEND_DONE
  std::vector<SendOp*> free_ops_;
  size_t next_write_ = 0;     // ops_[next_write_] is the first not fully written
  uint64_t blocked_len_ = 0;  // the record size that last found no room
  uint64_t msgs_written_ = 0;
  uint64_t msgs_acked_ = 0;  // the peer's msgs_done, as last read
  Status tx_error_;          // a corrupt ring found inside send()

  // --- receiving (receive.cc) ---------------------------------------------
  Rx rx_ = Rx::kIdle;
  RecordView held_;  // the message record an arrival points into
  uint64_t next_msg_id_ = 1;
  uint64_t held_id_ = 0;
  const uint8_t* held_header_ = nullptr;
  uint64_t held_header_len_ = 0;
  std::vector<ferry_arrival_segment_t> arrival_segs_;
  std::vector<InSegment> in_segs_;
  uint32_t ring_seg_ = 0;   // the segment the next chunk belongs to
  uint64_t ring_left_ = 0;  // ring-copied bytes still to consume
  uint64_t cma_left_ = 0;   // CMA bytes still to read
  bool msg_has_cma_ = false;
  void* place_user_data_ = nullptr;
  Status msg_status_;  // the placement's first error
  uint64_t msgs_done_ = 0;
};

}  // namespace ferry_shm
