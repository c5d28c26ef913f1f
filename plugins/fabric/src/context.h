// One fabric context (one init()): the libfabric endpoint and its buffers,
// every listener and connection, the event queue, and the lock that guards
// them all. The member functions are split by concern across files:
//   context.cc     set-up, query, listen, connect, reg/dereg, teardown
//   control.cc     handshake and teardown frames, breaking and closing
//   send.cc        send(): validation, inline vs bulk, the eager fast path
//   send_queue.cc  queued sends, waiting for FIN / CTS, completions
//   tx_frames.cc   bounce buffers, posting and re-posting frames, control
//   receive.cc     receive buffers, parsing, ordering, arrivals
//   answer.cc      place() / discard()
//   rendezvous.cc  large segments over RMA reads (+ FIN)
//   stream.cc      large segments as chunked messages when RMA is absent
//   progress.cc    progress(): the completion queue, retries, delivery
//
// Why one lock per context: progress() touches every connection and every
// host call may complete work of another (a FIN frees a send, a close fails
// placements); per-connection locks would need an order that calls from
// several threads keep threatening to invert. Nothing under the lock blocks
// (libfabric calls are non-blocking on this endpoint), and a host that drives
// a context from one thread pays one uncontended lock per call.
#pragma once

#include "buffer_pool.h"
#include "config.h"
#include "connection.h"
#include "endpoint.h"
#include "fd_hygiene.h"
#include "handle_table.h"
#include "messages.h"
#include "peer.h"
#include "provider.h"
#include "registration.h"
#include "status.h"
#include "wakeup.h"

#include "ferry_plugin/event_queue.h"
#include "ferry_plugin/mutex.h"

#include <ferry/transport.h>
#include <rdma/fi_eq.h>

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ferry_fabric {

using QueuedEvent = ferry_plugin::QueuedEvent<Conn>;
using EventQueue = ferry_plugin::EventQueue<Conn>;

class Context {
 public:
  static Status Create(uint32_t flags, const char* instance,
                       std::unique_ptr<Context>* out);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  ferry_plugin::Mutex& mutex() { return mu_; }

  // --- host calls (caller holds mutex()) -----------------------------------
  void Query(ferry_context_info_t* info) const;
  // progress(), send() and discard() are on every message's path: they
  // return a bare code and fill *error only when they fail.
  ferry_status_t Progress(ferry_progress_args_t* args, Status* error);
  Status Listen(const char* address, void* user_data, Listener** out);
  void CloseListener(Listener* listener);
  Status Connect(const char* address, void* user_data, Conn** out);
  ferry_status_t Send(Conn* conn, const ferry_send_args_t& args, Status* error);
  Status Place(Conn* conn, const ferry_place_args_t& args);
  ferry_status_t Discard(Conn* conn, uint64_t msg_id, Status* error);
  void Close(Conn* conn);
  Status Reg(const ferry_reg_args_t& args, HostMr** out);
  void Dereg(HostMr* mr);
  // After any host call: keeps the wakeup fd readable while progress() has
  // something to do. Inline: a busy-polled context has neither, and this
  // follows every send() and discard().
  void AfterHostCall() {
    if (sweep_pending_ || has_wakeup_) SettleAfterHostCall();
  }

  const Config& config() const { return config_; }

 private:
  explicit Context(Config config);
  void SettleAfterHostCall();
  Status Init(const char* instance);
  std::string Describe() const;

  // ---- events (context.cc) ----
  QueuedEvent& Emit(int32_t type, Conn* conn, void* user_data) {
    return events_.Push(type, conn, user_data);
  }
  void EmitError(int32_t type, Conn* conn, void* user_data, ferry_status_t status,
                 std::string message);
  bool HasWork() const;
  void DisarmDeadline(Conn* c);

  // ---- frames out (tx_frames.cc) ----
  // A bounce buffer for a frame; control frames may use the reserve.
  TxBuf* GetTxBuf(bool control);
  // Posts a filled bounce buffer; on -FI_EAGAIN it is kept for a retry (the
  // frame is ours, so nothing of the host's is held). False after a hard
  // error, which has then been handled.
  bool PostFrame(TxBuf* b);
  void QueueResend(TxBuf* b);
  void DrainResends();
  void DrainPendingControl();
  // A small control frame to `peer` on behalf of connection `conn_id`.
  void SendControl(Peer* peer, uint64_t conn_id, const void* frame, size_t len,
                   const void* tail = nullptr, size_t tail_len = 0);
  void OnSendCompletion(TxBuf* b);
  void OnSendError(TxBuf* b, const fi_cq_err_entry& err);
  void HandleTxFailure(uint64_t conn_id, uint8_t frame_type, ferry_status_t status,
                       const std::string& text);

  // ---- send() (send.cc, send_queue.cc) ----
  Status ValidateSend(Conn* c, const ferry_send_args_t& args, uint64_t* total) const;
  // Decides inline vs bulk for each segment; true when all are inline.
  bool Classify(const Conn* c, std::vector<SegRef>* segs, size_t header_len) const;
  // The fast path: an all-inline message on an idle open connection goes
  // out inside send(). False when it must be queued instead.
  bool TrySendSmall(Conn* c, const ferry_send_args_t& args);
  bool TrySendEagerNow(Conn* c, const ferry_send_args_t& args,
                       const std::vector<SegRef>& segs);
  // Records the peer's receive limits (CONNECT / ACCEPT) and what they
  // leave for TrySendSmall.
  void SetPeerLimits(Conn* c, const wire::Limits& limits);
  // The bulk data path both sides of `c` support.
  uint8_t BulkMode(const Conn* c) const;
  size_t FrameSize(const std::vector<SegRef>& segs, size_t header_len,
                   size_t num_remote) const;
  void EncodeMsg(Conn* c, char* out, uint64_t op_id, const char* header,
                 size_t header_len, const std::vector<SegRef>& segs,
                 const std::vector<wire::RemoteEntry>& remote);
  SendOp* NewSendOp();
  void FreeSendOp(SendOp* op);
  // Posts queued sends of `c` while bounce buffers last.
  void PumpTx(Conn* c);
  void ScheduleTx(Conn* c);
  void PumpTxRetries();
  enum class PostResult { kPosted, kBlocked, kFailed, kDropped };
  PostResult PostSendOp(Conn* c, SendOp* op);
  // SEND_DONE for `op` (which leaves every list) and its release.
  void CompleteSendOp(SendOp* op, ferry_status_t status, const std::string& message);
  void FailQueuedSends(Conn* c, ferry_status_t status, const std::string& message);
  void FailWaitingSends(Conn* c, ferry_status_t status, const std::string& message,
                        bool keep_exposed);

  // ---- receive side (receive.cc, answer.cc) ----
  // Posts `b`; on refusal it goes back to rx_idle_ for the next progress().
  void PostRecv(RxBuf* b);
  // fi_recv on `b`: false when the provider refused it (logged unless
  // -FI_EAGAIN).
  bool TryPostRecv(RxBuf* b);
  // Posts from the top of rx_idle_ until rx_posted buffers are posted (or
  // the provider refuses one).
  void RepostRx();
  // A buffer the provider or the host is done with: posted now when few
  // are, else left on rx_idle_ for the next progress(), off the host's path.
  void ReturnRxBuf(RxBuf* b);
  bool RxWantsBuffers() const { return rx_posted_ < rx_window_ && !rx_idle_.empty(); }
  // Fewer than half the window posted: worth waking a sleeping host for.
  bool RxLow() const { return rx_posted_ < rx_window_ / 2 && !rx_idle_.empty(); }
  void OnRecv(RxBuf* b, size_t len);
  // The usual small arrival in one pass; false (nothing changed) for
  // anything OnRecv must look at.
  bool TryInlineArrival(RxBuf* b, size_t len);
  // Arrivals are copied out ("spilled") once the host holds three quarters
  // of the pool: `posted` posted buffers and the idle ones are the rest.
  bool Spilling(uint32_t posted) const {
    return posted + rx_idle_.size() < rx_pool_.count() / 4;
  }
  // true when `b` was kept (the message holds it).
  bool OnMsg(RxBuf* b, size_t len);
  RxMsg* NewRxMsg() {  // from the free list; the pool grows out of line
    RxMsg* m = free_rx_msgs_;
    if (m == nullptr) return AddRxMsg();
    free_rx_msgs_ = m->next;
    m->next = nullptr;
    return m;
  }
  RxMsg* AddRxMsg();
  void ReleaseRxMsg(RxMsg* m);
  void TryDeliver(Conn* c);
  // Moves the messages that arrived ahead and are now next into c's ready
  // queue, in order.
  void TakeEarlyInOrder(Conn* c);
  // Hands `m` to the host as c's ARRIVAL (c holds nothing else).
  void DeliverArrival(Conn* c, RxMsg* m);
  void MaybeFinishPeerClose(Conn* c);
  void DropReceived(Conn* c);
  Status CheckAnswer(Conn* c, uint64_t msg_id, const char* call) const;
  // After place()/discard(): tells the sender (FIN / CTS) as needed.
  void TellSenderDropped(Conn* c, const RxMsg* m);

  // ---- RMA rendezvous (rendezvous.cc) ----
  Status ExposeSegments(SendOp* op);
  void OnFin(const char* frame, size_t len);
  Status StartReads(Conn* c, RxMsg* m, const ferry_place_args_t& args, Placement* p);
  void PumpReads();
  void OnReadCompletion(ReadOp* r, const fi_cq_err_entry* err);
  ReadOp* NewReadOp();
  void FreeReadOp(ReadOp* r);
  Placement* NewPlacement(Conn* c, void* user_data, uint64_t sender_op);
  // PLACE_DONE, FIN to the sender, and release of the placement.
  void FinishPlacement(Placement* p);
  void MaybeFinishPlacement(Placement* p);

  // ---- stream fallback (stream.cc) ----
  Status StartStream(Conn* c, RxMsg* m, const ferry_place_args_t& args, Placement* p);
  void OnCts(const char* frame, size_t len);
  void OnData(const char* frame, size_t len);
  void PumpStreams();
  void SendCts(Conn* c, uint64_t op_id, uint64_t mask, uint64_t stream_id);

  // ---- handshake and teardown (control.cc) ----
  void OnConnect(const char* frame, size_t len);
  void OnAccept(const char* frame, size_t len);
  void OnReject(const char* frame, size_t len);
  void OnDisconnect(const char* frame, size_t len);
  void OnDisconnectAck(const char* frame, size_t len);
  void SendReject(Peer* peer, uint64_t conn_id, ferry_status_t status,
                  const std::string& text);
  void SendDisconnect(Conn* c);
  void SendDisconnectAck(Conn* c);
  // The connection failed (not the host's close): CONN_BROKEN once, pending
  // operations fail with `status`.
  void Break(Conn* c, ferry_status_t status, const std::string& message);
  void FailConnect(Conn* c, ferry_status_t status, const std::string& message);
  // The peer can no longer be reached: for a closing connection, stop
  // waiting for it.
  void PeerLost(Conn* c);
  // After teardown-relevant changes: sends what is owed, emits CLOSED when
  // nothing is left.
  void CheckClose(Conn* c);
  void ArmDeadline(Conn* c, uint32_t ms);
  void CheckDeadlines();
  void UpdateTicking();
  wire::Limits OwnLimits() const;

  // ---- progress (progress.cc) ----
  void ReadCq();
  void HandleCqError();
  // fini() with a placement in flight: waits (bounded) for its RMA reads.
  void DrainReadsBeforeClose();
  // Queued events into the host's array from slot `first`; how many.
  uint32_t Deliver(ferry_progress_args_t* args, uint32_t first);
  void FreeRetired();

  ferry_plugin::Mutex mu_;  // ferry_plugin/mutex.h: every entry point takes it
  const Config config_;
  std::string instance_;
  Selection selection_;
  std::string provider_;
  std::unique_ptr<Endpoint> endpoint_;
  std::unique_ptr<Registrar> registrar_;
  std::unique_ptr<PeerTable> peers_;
  std::shared_ptr<std::atomic<bool>> alive_;  // LocalEndpoints flag
  Wakeup wakeup_;
  bool has_wakeup_ = false;
  FdSweeper fd_sweeper_;
  bool sweep_pending_ = false;
  std::string description_;
  std::string domain_;
  std::string no_wakeup_reason_;

  // Limits.
  uint32_t eager_size_ = 0;
  uint32_t max_header_ = 0;
  uint32_t max_inline_ = 0;
  size_t inject_size_ = 0;
  uint64_t max_read_ = 0;  // largest single fi_read
  bool rma_ = false;
  bool hmem_ = false;    // FI_HMEM opened
  std::string no_cuda_;  // why CUDA memory does not register, FI_HMEM open
  // FI_HMEM open and CUDA memory registers: device segments move.
  bool CudaMemory() const { return hmem_ && no_cuda_.empty(); }

  // Buffers.
  RxPool rx_pool_;
  TxPool tx_pool_;
  uint32_t tx_reserve_ = 0;  // bounce buffers only control frames may take
  uint32_t rx_posted_ = 0;
  uint32_t rx_window_ = 0;  // config_.rx_posted
  // Receive buffers neither posted nor held by a message: a stack, so the
  // buffer posted next is the one used last (still in cache).
  std::vector<RxBuf*> rx_idle_;
  uint64_t spill_bytes_ = 0;
  std::vector<char> inject_scratch_;
  TxBuf* resend_head_ = nullptr;  // frames to (re)post, FIFO
  TxBuf* resend_tail_ = nullptr;
  // Control frames that found no bounce buffer at all: sent as buffers
  // free up (they must never be lost: FIN, ACCEPT, DISCONNECT ...).
  struct PendingControl {
    Peer* peer;
    uint64_t conn_id;
    std::string bytes;
  };
  std::deque<PendingControl> pending_control_;
  std::vector<SegRef> seg_scratch_;  // send()'s segments, reused

  // Objects.
  HandleTable<Conn> conns_;
  HandleTable<SendOp> send_ops_;
  HandleTable<Placement> placements_;
  std::map<uint64_t, Listener*> listeners_;
  uint64_t next_listener_id_ = 1;
  std::vector<Conn*> all_conns_;          // every live Conn object (for fini)
  std::vector<Conn*> retired_;            // CLOSED returned: freed next progress()
  std::map<uint64_t, Peer*> tombstones_;  // closed while connecting
  std::vector<HostMr*> host_mrs_;         // released at fini if the host did not

  // Work lists.
  std::vector<uint64_t> tx_retry_;  // conn ids with queued sends
  std::vector<uint64_t> tx_retry_scratch_;
  std::deque<uint64_t> streaming_;  // send op ids streaming DATA
  ReadOp* reads_head_ = nullptr;    // reads to post, FIFO
  ReadOp* reads_tail_ = nullptr;
  uint32_t deadlines_ = 0;  // conns with a deadline armed

  // Pools.
  std::vector<std::unique_ptr<SendOp>> send_op_store_;
  SendOp* free_send_ops_ = nullptr;
  std::vector<std::unique_ptr<RxMsg>> rx_msg_store_;
  RxMsg* free_rx_msgs_ = nullptr;
  std::vector<std::unique_ptr<Placement>> placement_store_;
  Placement* free_placements_ = nullptr;
  std::vector<std::unique_ptr<ReadOp>> read_op_store_;
  ReadOp* free_read_ops_ = nullptr;

  EventQueue events_;
  // The host's event array while progress() runs (closed otherwise): the
  // arrivals it reads go straight there when nothing is queued before them.
  ferry_plugin::HostEvents host_events_;
};

}  // namespace ferry_fabric
