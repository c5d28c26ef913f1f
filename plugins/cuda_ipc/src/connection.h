// One cuda_ipc connection: a non-blocking Unix stream socket, the frames
// queued on it, the arrival the host holds, and the CUDA state that belongs
// to the peer:
//   sender side    event slots (interprocess events, exported once each,
//                  reused after the receiver's ACK), messages written and
//                  waiting for their ACK (their bytes and bounce buffers
//                  stay borrowed until then);
//   receiver side  the peer's event handles and the events opened from
//                  them (once per slot), the opened memory handles (an LRU
//                  cache keyed by the peer's buffer id, never by address),
//                  and the placements whose copies are in flight.
// Every function runs with the host's calls serialised (the plugin does
// not claim FERRY_CAP_THREAD_SAFE).
#pragma once

#include "status.h"
#include "wire.h"

#include "ferry_support/cuda_driver.h"

#include <ferry/transport.h>
#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace ferry_cuda_ipc {

class Context;

using Clock = std::chrono::steady_clock;

// What an epoll_event's data.ptr points at (the eventfd uses nullptr).
struct Pollable {
  enum class Kind { kListener, kConn };
  explicit Pollable(Kind k) : kind(k) {}
  const Kind kind;
};

// A posted send (or an internal ACK frame) until it is written and, for a
// message with device segments, acknowledged.
struct SendOp {
  uint64_t seq = 0;
  void* user_data = nullptr;
  bool is_ack = false;       // internal: no SEND_DONE
  bool needs_ack = false;    // has device segments
  Clock::time_point posted;  // for FERRY_CUDA_PROFILE's send-to-ACK
  std::vector<char> meta;    // FrameHead, SegDesc[], header
  std::vector<iovec> iov;    // meta, then the host segments' bytes (borrowed)
  size_t iov_next = 0;       // first iovec not completely written
  // Plain events recorded on the producers' streams (producer_wait host):
  // the frame is written once each has completed. (device, event)
  std::vector<std::pair<int, CUevent>> producers;
  // Held until the ACK: event slots and bounce blocks (device, pointer).
  std::vector<int> slots;
  std::vector<std::pair<int, void*>> bounces;
};

// One interprocess event of the sender's pool.
struct EventSlot {
  int dev = 0;
  CUevent ev = nullptr;
  CUipcEventHandle handle{};
  bool handle_sent = false;  // the peer has it (sent with the first use)
  bool busy = false;         // recorded for a message not acked yet
};

// A memory handle the receiver opened (cuIpcOpenMemHandle): the peer's
// allocation `buffer_id`, mapped at `base` in device `dev`'s context.
struct Mapping {
  uint64_t buffer_id = 0;
  int dev = 0;
  CUdeviceptr base = 0;
  int pins = 0;         // placements in flight reading it
  bool cached = true;   // still in the connection's cache
  bool leaked = false;  // abandoned under a copy that never ended
};

// A placement whose copies are in flight.
struct PendingCopy {
  uint64_t seq = 0;  // the sender's message, acked once done
  void* user_data = nullptr;
  Clock::time_point placed;                   // place() called (FERRY_CUDA_PROFILE)
  std::vector<std::pair<int, CUevent>> done;  // completion events, per device
  std::vector<Mapping*> pins;
  ferry_status_t status = FERRY_OK;  // a failure while posting the copies
  std::string message;
};

class Conn final : public Pollable {
 public:
  enum class State { kOpen, kFailed, kClosing };

  // `same_process`: the peer is this very process (SO_PEERCRED).
  Conn(Context* ctx, int fd, std::string peer, bool same_process);
  ~Conn();
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  Context* context() const { return ctx_; }
  State state() const { return state_; }
  const std::string& peer() const { return peer_; }
  void* user_data() const { return user_data_; }
  void set_user_data(void* u) { user_data_ = u; }
  int fd() const { return fd_; }

  // A connect() that failed at once: CONNECTED carries `why`.
  void FailConnect(ferry_status_t status, const std::string& why);
  // CONNECTED / ACCEPTED was returned: reading may start.
  void Announced();
  // CLOSED was returned: the context frees the connection.
  bool closed_delivered() const { return closed_delivered_; }
  void set_closed_delivered() { closed_delivered_ = true; }

  // --- host calls ---------------------------------------------------------
  ferry_status_t Send(const ferry_send_args_t& args, Status* error);
  ferry_status_t Place(const ferry_place_args_t& args, Status* error);
  ferry_status_t Discard(uint64_t msg_id, Status* error);
  void Close();

  // --- progress -----------------------------------------------------------
  void OnEpoll(uint32_t events);
  void Service();  // read and parse what the socket holds (when allowed)
  // Checks the placements in flight; true while some remain.
  bool PollCopies();
  bool copies_pending() const { return !copies_.empty(); }
  // The next frame waits for its producers' streams (producer_wait host):
  // progress() calls Flush(), which polls them.
  bool waiting_on_producer() const {
    return state_ == State::kOpen && !tx_.empty() && !tx_.front()->producers.empty();
  }
  void Flush();  // writes queued frames until the socket is full

 private:
  // Fails every pending operation, queues CONN_BROKEN once.
  void Fail(ferry_status_t status, const std::string& why);
  void FailErrno(const char* what, int err);
  void CloseFd();
  void UpdateEpoll();
  // True once every producer event of `op` has completed (each polled, never
  // waited for); a failed one fails the connection.
  bool ProducersDone(SendOp* op);
  void QueueFrame(std::unique_ptr<SendOp> op);
  void QueueAck(uint64_t seq);
  void CompleteSend(std::unique_ptr<SendOp> op, ferry_status_t status,
                    const std::string& why);
  void ReleaseSendResources(SendOp* op);
  // Fails sends queued or waiting for an ACK.
  void FailSends(ferry_status_t status, const std::string& why);
  void MaybeQueueClosed();

  // Sending device segments (send.cc).
  Status ExportSegment(const ferry_segment_t& seg, uint64_t stream, wire::SegDesc* d,
                       SendOp* op, std::vector<std::pair<uint64_t, int>>* recorded);
  Status TakeSlot(int dev, int* slot);

  // Receiving (receive.cc).
  bool ParseOne();  // one complete frame at the front of rx_: consumed?
  Status CheckMsg(const wire::FrameHead& h, const char* body);
  void OnAck(uint64_t seq);
  void ReleaseArrival();
  Status StartCopies(const ferry_place_args_t& args, PendingCopy* pc);
  Status OpenMapping(const wire::SegDesc& d, int dev, Mapping** out);
  Status OpenedEvent(int slot, int dev, CUevent* out);
  void Unpin(Mapping* m);
  void DropMappings();  // evicts every cached mapping (pinned ones later)
  void CloseMapping(Mapping* m);
  void FinishCopy(PendingCopy& pc, ferry_status_t status, const std::string& why);
  int LocalDevice(const wire::SegDesc& d) const;

  Context* const ctx_;
  int fd_;
  State state_ = State::kOpen;
  const std::string peer_;
  const bool same_process_;
  void* user_data_ = nullptr;
  bool announced_ = false;
  bool closed_queued_ = false;
  bool closed_delivered_ = false;
  bool broken_queued_ = false;
  bool peer_hung_up_ = false;
  uint32_t epoll_mask_ = 0;
  ferry_status_t fail_status_ = FERRY_OK;
  std::string fail_message_;
  Clock::time_point abandon_at_{};  // failed/closing: give up on copies then

  // Sending.
  uint64_t next_seq_ = 1;
  std::deque<std::unique_ptr<SendOp>> tx_;
  std::map<uint64_t, std::unique_ptr<SendOp>> awaiting_ack_;
  std::vector<EventSlot> slots_;
  std::unordered_map<uint64_t, CUipcMemHandle> exported_;  // buffer id -> handle

  // Receiving.
  std::vector<char> rx_;
  size_t rx_start_ = 0;  // the frame being parsed starts here
  size_t rx_end_ = 0;    // bytes read end here
  bool held_ = false;    // an ARRIVAL waits for place() / discard()
  uint64_t msg_id_ = 0;  // of the held (or last) arrival
  uint64_t held_seq_ = 0;
  Clock::time_point held_at_;  // when the held arrival was reported
  size_t held_frame_len_ = 0;
  bool held_device_ = false;
  std::vector<wire::SegDesc> held_descs_;  // of the held arrival
  std::vector<ferry_arrival_segment_t> arrival_segments_;
  std::unordered_map<int32_t, std::vector<unsigned char>> event_handles_;  // slot ->
  std::unordered_map<int32_t, CUevent> opened_events_;  // slot -> opened event
  std::list<Mapping*> lru_;                             // most recent first
  std::unordered_map<uint64_t, std::list<Mapping*>::iterator> mappings_;
  std::deque<PendingCopy> copies_;
};

}  // namespace ferry_cuda_ipc
