// One chaos context: an inner transport context it forwards to, the
// arrivals it has taken from the inner transport and holds back, the events
// it owes the host, and the one lock that guards all of it.
//
// Data flow of an arrival (README.md has the whole story):
//   inner ARRIVAL --drain--> Held (per connection, in inner arrival order)
//     all bytes copied: inline ones at once, the others place()d by chaos
//     into its own buffers (inner PLACE_DONE); dropped ones discard()ed
//   Held --release (when its delay is over; shuffled when reorder=1)-->
//     an ARRIVAL in queue_, every segment inline (or copied on place())
//   queue_ --progress()--> the host
//
// Locking: one mutex per context, held by every entry point for the whole
// call, including the calls into the inner context (which never call back).
// Calls into the inner context are therefore serialised, so chaos is
// THREAD_SAFE whatever the inner transport claims.
#pragma once

#include "config.h"
#include "inner.h"
#include "prng.h"
#include "status.h"

#include <ferry/transport.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace ferry_chaos {

class Context;

constexpr uint32_t kConnMagic = 0x6368636e;      // "chcn"
constexpr uint32_t kListenerMagic = 0x63686c73;  // "chls"
constexpr uint32_t kMrMagic = 0x63686d72;        // "chmr"
constexpr uint32_t kDeadMagic = 0xdeadc4a0;

// A drained message: header and every segment's bytes, owned by chaos.
// Shared by an arrival and its duplicate.
struct Message {
  struct Segment {
    uint64_t length = 0;
    ferry_device_t device{};
    std::unique_ptr<unsigned char[]> bytes;  // NULL when length is 0
  };
  std::vector<unsigned char> header;
  std::vector<Segment> segments;
};

// One copy of an arrival waiting in a connection's hold line.
struct Held {
  enum class State { kDraining, kReady, kLost };
  std::shared_ptr<Message> msg;
  uint64_t seq = 0;  // inner arrival index on the connection
  bool duplicate = false;
  uint64_t delay_ns = 0;
  State state = State::kDraining;
  uint64_t release_ns = 0;  // valid once kReady
};

class Conn;

// A message chaos is placing into its own buffers through the inner place().
struct Drain {
  Conn* conn = nullptr;
  std::vector<std::shared_ptr<Held>> entries;  // the original and a duplicate
};

// An arrival queued for, or returned to, the host and not answered yet.
struct Delivered {
  std::shared_ptr<Message> msg;
  std::vector<ferry_arrival_segment_t> segments;  // the event's descriptors
  bool returned = false;                          // progress() has returned its ARRIVAL
};

class Conn {
 public:
  Conn(Context* context, uint64_t conn_ordinal, uint64_t seed, void* host_user_data)
      : ctx(context),
        ordinal(conn_ordinal),
        rng(ConnSeed(seed, conn_ordinal)),
        user_data(host_user_data) {}
  ~Conn() { magic = kDeadMagic; }

  uint32_t magic = kConnMagic;
  Context* const ctx;
  const uint64_t ordinal;  // creation order in the context
  Rng rng;                 // this connection's decision stream
  ferry_conn_t* inner = nullptr;
  void* user_data;              // what the host sees as conn_user_data
  std::string connect_address;  // for conn_peer_address without the inner's
  uint64_t next_seq = 0;

  bool closing = false;        // the host called close()
  bool inner_closed = false;   // the inner CLOSED came: `inner` is invalid
  bool broken = false;         // the inner connection broke
  bool broken_queued = false;  // chaos's CONN_BROKEN is queued
  ferry_status_t broken_status = FERRY_OK;
  std::string broken_message;
  size_t drains = 0;  // Drains in flight on this connection

  uint64_t last_release_ns = 0;                      // reorder=0: FIFO release
  std::deque<std::shared_ptr<Held>> held;            // in inner arrival order
  std::unordered_map<uint64_t, Delivered> arrivals;  // by chaos msg_id
};

struct Listener {
  explicit Listener(Context* c) : ctx(c) {}
  ~Listener() { magic = kDeadMagic; }
  uint32_t magic = kListenerMagic;
  Context* const ctx;
  ferry_listener_t* inner = nullptr;
};

// A registration when the inner transport has none (reg() then only hands
// out a token; sends strip it). With an inner reg(), handles pass through.
struct Mr {
  ~Mr() { magic = kDeadMagic; }
  uint32_t magic = kMrMagic;
};

struct Stats {
  uint64_t inner_arrivals = 0;
  uint64_t dropped = 0;
  uint64_t duplicated = 0;
  uint64_t lost = 0;  // drain failed or abandoned (connection broke)
  uint64_t delivered = 0;
};

class Context {
 public:
  static Status Create(const ferry_init_args_t* args, std::unique_ptr<Context>* out);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  std::mutex& mutex() { return mu_; }

  // --- host calls (caller holds mutex()) ---------------------------------
  void Query(ferry_context_info_t* info) const;
  Status Progress(ferry_progress_args_t* args);
  Status Listen(const ferry_listen_args_t& args, Listener** out);
  Status ListenerAddress(Listener* l, char* buf, uint64_t buf_len);
  void CloseListener(Listener* l);
  Status Connect(const ferry_connect_args_t& args, Conn** out);
  void SetConnUserData(Conn* c, void* user_data) { c->user_data = user_data; }
  Status Send(Conn* c, const ferry_send_args_t* args);
  Status Place(Conn* c, const ferry_place_args_t& args);
  Status Discard(Conn* c, uint64_t msg_id);
  void Close(Conn* c);
  Status Reg(const ferry_reg_args_t* args, ferry_mr_t** out);
  void Dereg(ferry_mr_t* mr);
  Status PeerAddress(Conn* c, char* buf, uint64_t buf_len);
  // After a host call that may have queued events: keeps the wakeup fd
  // readable while progress() has something to return.
  void AfterHostCall() { UpdateWakeup(NowNs()); }

  const InnerPlugin& inner_plugin() const { return *inner_; }

 private:
  struct Queued {
    int32_t type = 0;
    ferry_status_t status = FERRY_OK;
    Conn* conn = nullptr;
    void* user_data = nullptr;
    std::string message;
    uint64_t msg_id = 0;      // ARRIVAL: key into conn->arrivals
    bool suppressed = false;  // the host closed the conn before it was returned
  };

  explicit Context(Config config);
  Status Init(const ferry_init_args_t* args);
  static uint64_t NowNs();

  // Inner events.
  Status PollInner();
  void HandleInner(const ferry_event_t& ev);
  void OnInnerArrival(Conn* c, const ferry_event_t& ev);
  void OnDrainDone(void* user_data, ferry_status_t status, const char* message);
  void MarkReady(Conn* c, Held* h, uint64_t now);
  Conn* FindByInner(ferry_conn_t* inner) const;

  // Releases and delivery.
  void ReleaseDue(uint64_t now);
  void QueueArrival(Conn* c, const std::shared_ptr<Message>& msg);
  void MaybeQueueBroken(Conn* c);
  Queued& Push(int32_t type, Conn* c, void* user_data);
  uint32_t Deliver(ferry_progress_args_t* args);
  uint64_t EarliestRelease() const;  // 0: nothing ready is held
  void UpdateWakeup(uint64_t now);
  void FreeRetired();

  // Calls into the inner context with a private error buffer; a failure
  // comes back as a Status carrying the inner transport's message.
  struct InnerErr {
    char data[512];
    ferry_error_buf_t buf;
    InnerErr();
    Status ToStatus(ferry_status_t code, const char* call) const;
  };

  std::mutex mu_;
  const Config config_;
  const InnerPlugin* inner_ = nullptr;
  ferry_context_t* inner_ctx_ = nullptr;
  ferry_context_info_t info_{};  // what query() answers
  std::string instance_, domain_, description_;
  uint64_t inline_limit_ = UINT64_MAX;  // segments above it are not inline
  bool inner_has_reg_ = false;

  int epoll_fd_ = -1;  // the wakeup fd: inner fd + timer_fd_ + event_fd_
  int timer_fd_ = -1;  // armed for the earliest held arrival's release
  int event_fd_ = -1;  // signalled while queue_ is not empty
  bool event_signalled_ = false;
  uint64_t timer_armed_ns_ = 0;
  uint64_t now_ns_ = 0;  // CLOCK_MONOTONIC at the current progress() step

  Rng release_rng_;  // the order of a batch of releases (reorder=1)
  uint64_t next_ordinal_ = 0;
  uint64_t next_msg_id_ = 1;
  Stats stats_;

  std::map<uint64_t, Conn*> conns_;  // by ordinal: deterministic order
  std::unordered_map<ferry_conn_t*, Conn*> by_inner_;
  std::unordered_map<void*, std::unique_ptr<Drain>> drains_;
  std::vector<Listener*> listeners_;
  std::vector<Mr*> mrs_;
  std::vector<Conn*> retired_;  // CLOSED returned: freed next progress()
  std::deque<Queued> queue_;
  std::deque<std::string> delivered_messages_;  // live until next progress()
  std::vector<ferry_event_t> inner_events_;
};

}  // namespace ferry_chaos
