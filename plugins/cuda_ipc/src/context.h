// One cuda_ipc context (one init()): an epoll set that is the host's wakeup
// fd, an eventfd in it for work no socket announces (queued events,
// connections with buffered frames, copies in flight), the event queue,
// every listener and connection, the parameters and the CUDA state (none in
// host-only mode).
//
// Wakeup: sockets are registered level-triggered with an interest that
// follows each connection's state (EPOLLIN only while it may read, EPOLLOUT
// only while frames wait), so the epoll fd is readable exactly while
// progress() has work. The eventfd is kept signalled while events are
// queued, connections wait to be serviced, or copies are in flight (there
// is no fd for a CUDA event: progress() polls cuEventQuery, so the host
// keeps calling it), and drained once none is left.
#pragma once

#include "connection.h"
#include "device.h"
#include "status.h"

#include "ferry_plugin/event_queue.h"

#include <ferry/transport.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

namespace ferry_cuda_ipc {

using QueuedEvent = ferry_plugin::QueuedEvent<Conn>;
using EventQueue = ferry_plugin::EventQueue<Conn>;

struct Config {
  bool host_only = false;  // parameter host_only: no driver, host memory only
  uint32_t max_header = 64 * 1024;
  uint32_t max_segments = 64;
  uint64_t max_host_bytes = uint64_t{256} << 20;  // host bytes per message
  uint64_t max_message = uint64_t{1} << 40;
  uint32_t handle_cache = 256;  // opened memory handles per connection
  uint32_t abandon_ms = 10000;  // broken connection: wait this long for copies
  // producer_wait: where a device segment's producer stream is waited for.
  // Host (the default): the sender polls an event it recorded there and
  // writes the frame once it has completed. GPU: the receiver's copy
  // stream waits on an interprocess event (the sender never waits).
  bool producer_wait_gpu = false;
  std::string domain;
};

class Context;

class Listener final : public Pollable {
 public:
  Listener(Context* ctx, int fd, std::string address, std::string path, void* user_data)
      : Pollable(Kind::kListener),
        ctx_(ctx),
        fd_(fd),
        address_(std::move(address)),
        path_(std::move(path)),
        user_data_(user_data) {}
  ~Listener();
  Context* context() const { return ctx_; }
  int fd() const { return fd_; }
  const std::string& address() const { return address_; }
  void* user_data() const { return user_data_; }

 private:
  Context* ctx_;
  int fd_;
  std::string address_;
  std::string path_;  // file system socket to unlink, or ""
  void* user_data_;
};

class Context {
 public:
  static Status Create(uint32_t flags, const char* instance,
                       std::unique_ptr<Context>* out);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // --- host calls ---------------------------------------------------------
  void Query(ferry_context_info_t* info) const;
  ferry_status_t Progress(ferry_progress_args_t* args, Status* error);
  Status Listen(const char* address, void* user_data, Listener** out);
  void CloseListener(Listener* l);
  Status Connect(const char* address, void* user_data, Conn** out);
  void AfterHostCall() { UpdateWakeup(); }
  bool Owns(Listener* l) const { return listeners_.count(l) != 0; }

  // --- for connections ----------------------------------------------------
  const Config& config() const { return config_; }
  Gpu* gpu() { return gpu_.get(); }  // null in host-only mode
  QueuedEvent& Emit(int32_t type, Conn* conn, void* user_data) {
    return events_.Push(type, conn, user_data);
  }
  void EmitError(int32_t type, Conn* conn, void* user_data, ferry_status_t status,
                 const std::string& message);
  EventQueue& events() { return events_; }
  // `conn` has buffered frames to parse: progress() services it.
  void Kick(Conn* conn) { kicked_.push_back(conn); }
  Status SetEpoll(int fd, uint32_t want, uint32_t* mask, Pollable* tag);
  void Forget(Conn* conn);  // removes conn from the kick list

 private:
  Context() = default;
  void UpdateWakeup();
  void AcceptAll(Listener* l);
  void Delivered(Conn* conn, int32_t type);

  Config config_;
  std::string description_;
  std::unique_ptr<Gpu> gpu_;
  int epoll_fd_ = -1;
  int wakeup_fd_ = -1;
  bool signalled_ = false;
  EventQueue events_;
  std::unordered_set<Conn*> conns_;
  std::unordered_set<Listener*> listeners_;
  std::vector<Conn*> kicked_;
  std::vector<Conn*> servicing_;
};

}  // namespace ferry_cuda_ipc
