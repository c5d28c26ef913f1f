// One tcp context (one init()): an epoll set that is also the host's wakeup
// fd, an eventfd for work queued outside progress(), the event queue, every
// listener and connection, and the lock that guards them all.
//
// Why one lock per context rather than per connection: progress() touches
// every connection (epoll results, the ready list, event delivery) and every
// connection pushes into the shared event queue; per-connection locks would
// need a lock order between connection and context that host calls from
// several threads (send here, close there, progress elsewhere) keep
// threatening to invert. Everything done under the lock is a non-blocking
// syscall or a memcpy, so it is held for microseconds, and the common case
// (one thread driving a context) pays one uncontended lock per call.
//
// Wakeup: the host sleeps on the epoll fd, which is readable exactly while
// epoll's ready list holds something. Sockets are registered edge-triggered,
// so a connection whose reading is paused (an arrival waiting for its
// answer) does not keep waking the host. Work that no socket will announce
// (a send that completed inside send(), a buffered message after discard())
// is announced by the eventfd, written only when it is not already pending.
// In sleeping mode the eventfd is registered edge-triggered too: a write puts
// it on the ready list, and the epoll_wait in progress() that reports it
// takes it off, so it never has to be read back (one syscall per wake-up
// instead of two); whatever is still queued after that progress() is
// signalled again at its end. A progress() that already has events to
// return skips epoll_wait (at most every other call): the host calls again
// before sleeping, and uncollected readiness keeps the fd readable. In
// busy-poll mode the eventfd is level-triggered and stays signalled for
// good: the host spins anyway, and the hot path then needs no wakeup syscall
// at all.
#pragma once

#include "config.h"
#include "frame_parser.h"
#include "pollable.h"
#include "send_op.h"
#include "status.h"

#include "ferry_plugin/event_queue.h"
#include "ferry_plugin/mutex.h"

#include <ferry/transport.h>

#include <sys/uio.h>

#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

namespace ferry_tcp {

// The context lock (why one per context: above).
using ContextMutex = ferry_plugin::Mutex;

class Conn;
class Listener;

using QueuedEvent = ferry_plugin::QueuedEvent<Conn>;
using EventQueue = ferry_plugin::EventQueue<Conn>;

class Context {
 public:
  static Status Create(uint32_t flags, const char* instance,
                       std::unique_ptr<Context>* out);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  ContextMutex& mutex() { return mu_; }

  // --- host calls (caller holds mutex()) ---------------------------------
  void Query(ferry_context_info_t* info) const;
  ferry_status_t Progress(ferry_progress_args_t* args, Status* error);
  Status Listen(const char* address, void* user_data, Listener** out);
  void CloseListener(Listener* listener);
  Status Connect(const char* address, void* user_data, Conn** out);
  // After any host call that may have queued events or work: keeps the
  // wakeup fd readable while progress() has something to do.
  void AfterHostCall() { UpdateWakeup(); }

  // --- for connections and listeners -------------------------------------
  const Config& config() const { return config_; }
  const ReceiveLimits& receive_limits() const { return limits_; }
  QueuedEvent& Emit(int32_t type, Conn* conn, void* user_data) {
    return events_.Push(type, conn, user_data);
  }
  void EmitError(int32_t type, Conn* conn, void* user_data, ferry_status_t status,
                 std::string message);
  void Schedule(Conn* conn);
  void AddOpen(Conn* conn);
  uint64_t progress_epoch() const { return progress_epoch_; }
  void Cork(Conn* conn);
  void Uncork(Conn* conn);
  void RemoveOpen(Conn* conn);
  // close() on `conn`: queued arrivals the host has not seen are dropped and
  // a CONNECTED it has not seen completes with FERRY_CANCELLED (`cancelled`
  // is its message).
  void RecallForClose(Conn* conn, const std::string& cancelled);
  void Accept(int fd, void* listener_user_data);
  void Unregister(int fd);
  SendOpPool& send_ops() { return send_ops_; }
  SendOp* NewHelloOp();
  iovec* iov_scratch() { return iov_scratch_.data(); }
  size_t iov_scratch_size() const { return iov_scratch_.size(); }
  char* drop_scratch() { return drop_scratch_.get(); }
  static constexpr size_t kDropScratchSize = 64 * 1024;

 private:
  explicit Context(Config config);
  Status Init(const char* instance);
  bool Register(int fd, uint32_t events, Pollable* target, Status* err);
  void PollSockets(bool events_queued);
  void RunReady();
  void FlushCorked();  // first in progress(): writes what Cork held back
  uint32_t Deliver(ferry_progress_args_t* args);
  // Makes the wakeup fd readable if there is work and it is not already.
  void UpdateWakeup();
  void SignalWakeup();
  void FreeRetired();

  class WakeupTag final : public Pollable {
   public:
    WakeupTag() : Pollable(Kind::kWakeup) {}
    void OnEpoll(uint32_t) override {}
  };

  ContextMutex mu_;
  const Config config_;
  ReceiveLimits limits_;
  std::string instance_;
  std::string description_;
  char hello_[64];  // this side's encoded hello, the same for every conn

  int epoll_fd_ = -1;
  int wakeup_fd_ = -1;  // eventfd inside the epoll set
  // Sleeping mode: an eventfd write is on the epoll ready list, not yet
  // reported by epoll_wait (so the epoll fd is readable). Busy-poll: always.
  bool wakeup_signalled_ = false;
  bool skipped_epoll_ = false;  // the last progress() skipped epoll_wait
  WakeupTag wakeup_tag_;
  uint32_t poll_tick_ = 0;

  EventQueue events_;

  std::unordered_set<Conn*> conns_;
  std::unordered_set<Listener*> listeners_;
  std::vector<Conn*> ready_;    // connections with work for Service()
  std::vector<Conn*> running_;  // ready_ being serviced (swapped)
  std::vector<Conn*> open_;     // established, socket still open
  // Busy-poll mode: up to kMaxSpinConns of open_, taken out of epoll and
  // read directly on every progress() (see AddOpen).
  std::vector<Conn*> spun_;
  // Busy-poll mode: connections whose sends wait for the next progress()
  // (Conn::Send), and which progress() that is.
  std::vector<Conn*> corked_;
  uint64_t progress_epoch_ = 1;
  std::vector<Conn*> retired_;  // FERRY_EV_CLOSED returned: free next time

  SendOpPool send_ops_;
  std::vector<iovec> iov_scratch_;
  std::unique_ptr<char[]> drop_scratch_;
};

}  // namespace ferry_tcp
