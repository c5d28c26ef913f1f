// One shm context (one init()): its connections and listeners, the epoll set
// that is also the host's wakeup fd, and the progress loop with its
// spin-then-sleep policy.
//
// Why the progress loop polls every connection: shared-memory rings announce
// nothing by themselves (that is what makes them fast), so progress() looks
// at each connection's ring head; a doorbell is only armed when the context
// goes to sleep (context_wait.cc).
//
// Ownership: connections and listeners are created by host calls (any
// thread) and handed to the progress thread through `incoming_`; only the
// progress thread walks `conns_`, and only it frees connections (after
// CLOSED, once no host call is inside them) and listeners (one progress()
// after close_listener(), since an epoll result may still point at one).
#pragma once

#include "config.h"
#include "event_sink.h"
#include "listener.h"
#include "pollable.h"
#include "status.h"

#include <ferry/transport.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ferry_shm {

class Conn;

class Context {
 public:
  static Status Create(const ferry_init_args_t* args, std::unique_ptr<Context>* out);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // --- host calls ---------------------------------------------------------
  void Query(ferry_context_info_t* info) const;
  Status Progress(ferry_progress_args_t* args);
  Status Listen(const char* address, void* user_data, Listener** out);
  void CloseListener(Listener* listener);
  Status Connect(const char* address, void* user_data, Conn** out);

  // --- for connections ----------------------------------------------------
  const Config& config() const { return config_; }
  // Adds `fd` to the epoll set (level-triggered, readable or hung up).
  void Register(int fd, Pollable* p);
  void Unregister(int fd);
  // A host call queued work for progress(): make the wakeup fd readable if
  // progress() may be asleep. Cheap when it is not (one atomic load). Call
  // it after releasing the lock the work was published under (the
  // connection's or the context's): Arm() re-checks under the same locks,
  // so either it sees the work or Kick() sees armed_.
  void Kick();
  void SetupBegan() { setups_.fetch_add(1, std::memory_order_relaxed); }
  void SetupEnded() { setups_.fetch_sub(1, std::memory_order_relaxed); }

 private:
  Context() = default;
  Status Init(const ferry_init_args_t* args);

  void Adopt();
  void FreeRetired();
  bool PollIo();
  void Accept(Listener* l);  // listener.cc
  bool PassOverConns();

  // context_wait.cc: the spin-then-sleep policy.
  bool SpinThenArm();
  bool Arm();
  void Disarm();
  void SignalNotify();
  void DrainNotify();

  Config config_;
  std::string description_;
  int epfd_ = -1;
  int notify_fd_ = -1;
  Pollable notify_poll_{Pollable::kNotify, nullptr};

  std::mutex mu_;  // guards the members up to `armed_`
  std::vector<Conn*> incoming_;
  std::vector<Listener*> listeners_;
  std::vector<Listener*> closed_listeners_;
  std::string socket_dir_;

  std::atomic<bool> has_incoming_{false};
  std::atomic<bool> has_closed_listeners_{false};
  std::atomic<bool> armed_{false};
  std::atomic<int> setups_{0};

  // Progress thread only.
  std::vector<Conn*> conns_;
  std::vector<Conn*> retired_;  // CLOSED returned; freed once no call is inside
  EventSink sink_;
  bool notify_signalled_ = false;
  uint32_t tick_ = 0;
  uint64_t last_io_ns_ = 0;
};

}  // namespace ferry_shm
