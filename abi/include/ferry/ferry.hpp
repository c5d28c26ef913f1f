// ferry.hpp — a header-only C++17 layer over the C API (ferry.h): RAII
// handles, exceptions for errors, std::function handlers. It adds no ABI:
// everything goes through ferry.h, so a program built with one compiler
// works with a libferry.so built by another.
#pragma once

#include <ferry/ferry.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ferry {

// A failed call: the status code (FERRY_*) and the message.
class Error : public std::runtime_error {
 public:
  Error(ferry_status_t code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ferry_status_t code() const { return code_; }

 private:
  ferry_status_t code_;
};

inline void Check(ferry_status_t s) {
  if (s != FERRY_OK) throw Error(s, ferry_last_error());
}

class Message;

// A remote reference. Copying is not allowed (each handle is one fork);
// move it, or pass it in a Payload to share it.
class RRef {
 public:
  RRef() = default;
  explicit RRef(ferry_rref_t* r) : r_(r) {}
  RRef(RRef&& o) noexcept : r_(std::exchange(o.r_, nullptr)) {}
  RRef& operator=(RRef&& o) noexcept {
    if (this != &o) {
      ferry_rref_release(r_);
      r_ = std::exchange(o.r_, nullptr);
    }
    return *this;
  }
  ~RRef() { ferry_rref_release(r_); }
  explicit operator bool() const { return r_ != nullptr; }
  ferry_rref_t* get() const { return r_; }

  bool is_owner() const { return ferry_rref_is_owner(r_) != 0; }
  uint64_t owner_id() const { return ferry_rref_owner_id(r_); }
  inline Message ToHere(std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  // Owner only: the value's bytes, writable in place.
  std::string_view LocalBytes(
      std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) {
    void* bytes = nullptr;
    uint64_t n = 0;
    Check(ferry_rref_local_value(r_, static_cast<uint32_t>(timeout.count()), &bytes, &n,
                                 nullptr, nullptr));
    return std::string_view(static_cast<const char*>(bytes), n);
  }
  char* MutableLocalBytes(uint64_t* n) {
    void* bytes = nullptr;
    Check(ferry_rref_local_value(r_, 0, &bytes, n, nullptr, nullptr));
    return static_cast<char*>(bytes);
  }

 private:
  ferry_rref_t* r_ = nullptr;
};

// What a call carries out: bytes, tensors (taken: their deleters run once
// they are sent) and RRefs (borrowed: each becomes a fork at the receiver).
class Payload {
 public:
  Payload() = default;
  explicit Payload(std::string bytes) : bytes_(std::move(bytes)) {}
  Payload& Bytes(std::string b) {
    bytes_ = std::move(b);
    return *this;
  }
  Payload& Tensor(DLManagedTensor* t) {
    tensors_.push_back(t);
    return *this;
  }
  Payload& Ref(const RRef& r) {
    rrefs_.push_back(r.get());
    return *this;
  }
  // Device tensors: the stream their producer wrote them on
  // (FERRY_STREAM_LEGACY, the default; FERRY_STREAM_PER_THREAD, a CUstream
  // cast to uint64_t, or FERRY_STREAM_READY once you synchronised).
  Payload& Stream(uint64_t stream) {
    stream_ = stream;
    return *this;
  }
  // Sends the host tensors from their own memory (ferry_payload_t.zero_copy):
  // do not write them until the call's future is done. By default ferry
  // sends the bytes they held when the call was made (a pooled copy).
  Payload& ZeroCopy(bool on = true) {
    zero_copy_ = on ? FERRY_ZERO_COPY_ALL : 0;
    return *this;
  }
  // The C view; tensors are handed over by the call that uses it.
  const ferry_payload_t* c() {
    p_ = ferry_payload_t{};
    p_.struct_size = FERRY_PAYLOAD_STRUCT_SIZE;
    p_.bytes = bytes_.data();
    p_.num_bytes = bytes_.size();
    p_.tensors = tensors_.empty() ? nullptr : tensors_.data();
    p_.num_tensors = static_cast<uint32_t>(tensors_.size());
    p_.rrefs = rrefs_.empty() ? nullptr : rrefs_.data();
    p_.num_rrefs = static_cast<uint32_t>(rrefs_.size());
    p_.stream = stream_;
    p_.zero_copy = zero_copy_;
    return &p_;
  }
  void Released() { tensors_.clear(); }  // after a call took the tensors

 private:
  std::string bytes_;
  std::vector<DLManagedTensor*> tensors_;
  std::vector<ferry_rref_t*> rrefs_;
  // DLPack's default for a CUDA consumer: the legacy default stream, which
  // orders after every blocking stream's work. READY only when asked for.
  uint64_t stream_ = FERRY_STREAM_LEGACY;
  uint64_t zero_copy_ = 0;
  ferry_payload_t p_{};
};

// A received payload.
class Message {
 public:
  Message() = default;
  explicit Message(ferry_message_t* m) : m_(m) {}
  // A view of a message ferry owns (a handler's arguments): valid while the
  // handler runs; take tensors and RRefs out of it to keep them.
  static Message Borrow(ferry_message_t* m) {
    Message v(m);
    v.owned_ = false;
    return v;
  }
  Message(Message&& o) noexcept : m_(std::exchange(o.m_, nullptr)), owned_(o.owned_) {}
  Message& operator=(Message&& o) noexcept {
    if (this != &o) {
      if (owned_) ferry_message_release(m_);
      m_ = std::exchange(o.m_, nullptr);
      owned_ = o.owned_;
    }
    return *this;
  }
  ~Message() {
    if (owned_) ferry_message_release(m_);
  }
  std::string_view bytes() const {
    uint64_t n = 0;
    const void* p = ferry_message_bytes(m_, &n);
    return std::string_view(static_cast<const char*>(p), n);
  }
  uint32_t num_tensors() const { return ferry_message_num_tensors(m_); }
  // Owned by the caller (call its deleter).
  DLManagedTensor* TakeTensor(uint32_t i) { return ferry_message_take_tensor(m_, i); }
  uint32_t num_rrefs() const { return ferry_message_num_rrefs(m_); }
  RRef TakeRRef(uint32_t i) { return RRef(ferry_message_take_rref(m_, i)); }

 private:
  ferry_message_t* m_ = nullptr;
  bool owned_ = true;
};

inline Message RRef::ToHere(std::chrono::milliseconds timeout) {
  ferry_message_t* m = nullptr;
  Check(ferry_rref_to_here(r_, static_cast<uint32_t>(timeout.count()), &m));
  return Message(m);
}

// An incoming call. Answer it once: Reply or Fail. Destroying an
// unanswered Call fails it (FERRY_INTERNAL), so a handler that throws or
// forgets still answers; move it elsewhere to answer later.
class Call {
 public:
  explicit Call(ferry_call_t* c) : c_(c) {}
  Call(Call&& o) noexcept : c_(std::exchange(o.c_, nullptr)) {}
  Call& operator=(Call&&) = delete;
  ~Call() {
    if (c_) ferry_call_fail(c_, FERRY_INTERNAL, "the handler did not answer the call");
  }
  void Reply(Payload result = Payload()) {
    ferry_status_t s = ferry_call_reply(std::exchange(c_, nullptr), result.c());
    result.Released();
    Check(s);
  }
  void Fail(ferry_status_t code, const std::string& message) {
    Check(ferry_call_fail(std::exchange(c_, nullptr), code, message.c_str()));
  }
  bool pending() const { return c_ != nullptr; }
  uint64_t caller_id() const { return ferry_call_caller_id(c_); }
  std::string caller_name() const { return ferry_call_caller_name(c_); }
  // While pending: the function called, the caller's deadline (milliseconds
  // left, UINT32_MAX when none) and whether the caller gave up on the call
  // (cancelled, past its deadline, gone): see ferry_call_cancelled.
  std::string function() const { return ferry_call_function(c_); }
  std::chrono::milliseconds remaining() const {
    return std::chrono::milliseconds(ferry_call_remaining_ms(c_));
  }
  bool cancelled() const { return ferry_call_cancelled(c_) != 0; }

 private:
  ferry_call_t* c_;
};

class Future {
 public:
  explicit Future(ferry_future_t* f) : f_(f) {}
  Future(Future&& o) noexcept : f_(std::exchange(o.f_, nullptr)) {}
  Future& operator=(Future&&) = delete;
  ~Future() { ferry_future_release(f_); }
  // True once done; false if still pending after `timeout`.
  bool Wait(std::chrono::milliseconds timeout) {
    return ferry_future_wait(f_, static_cast<uint32_t>(timeout.count())) == FERRY_OK;
  }
  bool done() const { return ferry_future_is_done(f_) != 0; }
  // Gives up on the call (ferry_future_cancel): false if it was done.
  bool Cancel() { return ferry_future_cancel(f_) == FERRY_OK; }
  // Waits for the end, then returns the value or throws the remote error.
  Message Get() {
    ferry_future_wait(f_, UINT32_MAX);
    ferry_message_t* m = nullptr;
    const char* why = nullptr;
    const ferry_status_t s = ferry_future_status(f_, &why);
    if (s != FERRY_OK) throw Error(s, why ? why : "");
    Check(ferry_future_take(f_, &m));
    return Message(m);
  }
  ferry_status_t status(std::string* message = nullptr) const {
    const char* m = nullptr;
    const ferry_status_t s = ferry_future_status(f_, &m);
    if (message) *message = m ? m : "";
    return s;
  }
  // `fn` runs once done (here if already done, else on the completing
  // thread: it must not block). The Future must outlive the call of fn.
  void Then(std::function<void()> fn) {
    auto* heap = new std::function<void()>(std::move(fn));
    Check(ferry_future_then(
        f_,
        [](void* ud, ferry_future_t*) {
          std::unique_ptr<std::function<void()>> f(
              static_cast<std::function<void()>*>(ud));
          (*f)();
        },
        heap));
  }

 private:
  ferry_future_t* f_;
};

struct MemberView {
  int32_t state;
  uint64_t id;
  uint64_t incarnation;
  std::string name;
  std::string transport;
  int32_t rank = -1;  // in a static job; -1 in an elastic one
};

// How Worker::Shutdown leaves (ferry.h, ferry_worker_shutdown_ex).
enum class ShutdownMode : uint32_t {
  kGraceful = FERRY_SHUTDOWN_GRACEFUL,    // a static job's barrier, then leave
  kImmediate = FERRY_SHUTDOWN_IMMEDIATE,  // leave at once
};
// A timeout that never passes (FERRY_NO_TIMEOUT).
inline constexpr std::chrono::milliseconds kNoTimeout = std::chrono::milliseconds::max();

class Worker {
 public:
  struct Options {
    std::string name;
    std::string job;        // "" = FERRY_JOB or "default"
    std::string transport;  // "" = FERRY_TRANSPORT or "tcp"
    std::string store;      // "" = FERRY_STORE
    bool host_store = false;
    bool busy_poll = false;
    const char* secret = nullptr;  // NULL = FERRY_SECRET_FILE / FERRY_SECRET
    std::chrono::milliseconds default_timeout{0};
    std::chrono::milliseconds peer_timeout{0};
    std::chrono::milliseconds join_timeout{0};
    // Where received device tensors are allocated (copied at start; its
    // functions must outlive the worker and every tensor it received).
    // NULL = the device transport's own allocator.
    const ferry_device_allocator_t* device_allocator = nullptr;
    // A static job of world_size workers, this one of rank `rank` (-1: the
    // environment's RANK). 0 = the environment decides: WORLD_SIZE / RANK
    // as torchrun sets them, else an elastic job. elastic = true: elastic
    // even when WORLD_SIZE is set. (docs/membership.md)
    uint32_t world_size = 0;
    int32_t rank = -1;
    bool elastic = false;
    std::chrono::milliseconds start_timeout{0};  // 0 = 5 minutes
    // What peers and callers may use (docs/limits.md): a field 0 = its
    // FERRY_* environment variable, else its default. struct_size need not
    // be set.
    ferry_limits_t limits{};
  };
  // `args` is a view valid while the handler runs (Message::Borrow). The
  // handler answers `call`, or moves it away to answer later. An exception
  // escaping the handler fails the call with its what() text.
  using Handler = std::function<void(Call& call, Message args)>;

  explicit Worker(const Options& o) : state_(std::make_unique<State>()) {
    ferry_worker_options_t c{};
    c.struct_size = FERRY_WORKER_OPTIONS_STRUCT_SIZE;
    c.flags = (o.host_store ? FERRY_WORKER_HOST_STORE : 0) |
              (o.busy_poll ? FERRY_WORKER_BUSY_POLL : 0) |
              (o.elastic ? FERRY_WORKER_ELASTIC : 0);
    c.name = o.name.c_str();
    c.job = o.job.empty() ? nullptr : o.job.c_str();
    c.transport = o.transport.empty() ? nullptr : o.transport.c_str();
    c.store_address = o.store.empty() ? nullptr : o.store.c_str();
    c.secret = o.secret;
    c.default_timeout_ms = static_cast<uint32_t>(o.default_timeout.count());
    c.peer_timeout_ms = static_cast<uint32_t>(o.peer_timeout.count());
    c.join_timeout_ms = static_cast<uint32_t>(o.join_timeout.count());
    c.device_allocator = o.device_allocator;
    c.world_size = o.world_size;
    c.rank = o.rank;
    c.start_timeout_ms = static_cast<uint32_t>(o.start_timeout.count());
    ferry_limits_t limits = o.limits;
    limits.struct_size = FERRY_LIMITS_STRUCT_SIZE;
    c.limits = &limits;
    Check(ferry_worker_start(&c, &w_));
  }
  Worker(Worker&& o) noexcept
      : w_(std::exchange(o.w_, nullptr)), state_(std::move(o.state_)) {}
  Worker& operator=(Worker&&) = delete;
  ~Worker() { ferry_worker_destroy(w_); }
  ferry_worker_t* get() const { return w_; }

  uint64_t id() const { return ferry_worker_id(w_); }
  // A static job's rank (torch's WorkerInfo.id) and world size; -1 and 0
  // in an elastic job.
  int32_t rank() const { return ferry_worker_rank(w_); }
  uint32_t world_size() const { return ferry_worker_world_size(w_); }
  std::string name() const { return ferry_worker_name(w_); }
  std::string store_address() const { return ferry_worker_store_address(w_); }

  void Register(const std::string& function, Handler h, uint32_t flags = 0) {
    state_->handlers.push_back(std::make_unique<Handler>(std::move(h)));
    Check(ferry_register(
        w_, function.c_str(),
        [](void* ud, ferry_call_t* call, ferry_message_t* args) {
          auto& fn = *static_cast<Handler*>(ud);
          Call c(call);
          try {
            fn(c, Message::Borrow(args));
          } catch (const std::exception& e) {
            if (c.pending()) c.Fail(FERRY_UNKNOWN, e.what());
          } catch (...) {
            if (c.pending())
              c.Fail(FERRY_UNKNOWN, "the handler threw a non-std exception");
          }
        },
        state_->handlers.back().get(), flags));
  }

  Message RpcSync(const std::string& to, const std::string& function,
                  Payload args = Payload(),
                  std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) {
    ferry_message_t* m = nullptr;
    ferry_status_t s = ferry_rpc_sync(w_, to.c_str(), function.c_str(), args.c(),
                                      static_cast<uint32_t>(timeout.count()), &m);
    args.Released();
    Check(s);
    return Message(m);
  }
  Future RpcAsync(const std::string& to, const std::string& function,
                  Payload args = Payload(),
                  std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) {
    ferry_future_t* f = nullptr;
    ferry_status_t s = ferry_rpc_async(w_, to.c_str(), function.c_str(), args.c(),
                                       static_cast<uint32_t>(timeout.count()), &f);
    args.Released();
    Check(s);
    return Future(f);
  }
  RRef Remote(const std::string& to, const std::string& function,
              Payload args = Payload(),
              std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) {
    ferry_rref_t* r = nullptr;
    ferry_status_t s = ferry_remote(w_, to.c_str(), function.c_str(), args.c(),
                                    static_cast<uint32_t>(timeout.count()), &r);
    args.Released();
    Check(s);
    return RRef(r);
  }
  RRef CreateRRef(Payload value) {
    ferry_rref_t* r = nullptr;
    ferry_status_t s = ferry_rref_create(w_, value.c(), &r);
    value.Released();
    Check(s);
    return RRef(r);
  }
  std::vector<MemberView> Members() {
    uint32_t n = 0;
    Check(ferry_worker_members(w_, nullptr, 0, &n));
    std::vector<ferry_member_t> raw(n + 8);
    raw[0].struct_size = FERRY_MEMBER_STRUCT_SIZE;
    Check(ferry_worker_members(w_, raw.data(), static_cast<uint32_t>(raw.size()), &n));
    std::vector<MemberView> out;
    for (uint32_t i = 0; i < n && i < raw.size(); ++i) {
      out.push_back({raw[i].state, raw[i].id, raw[i].incarnation, raw[i].name,
                     raw[i].transport, raw[i].rank});
    }
    return out;
  }
  void WaitForWorkers(uint32_t n, std::chrono::milliseconds timeout) {
    Check(ferry_wait_for_workers(w_, n, static_cast<uint32_t>(timeout.count())));
  }
  // `fn` runs on a ferry thread: it must not block.
  void OnMembership(std::function<void(const MemberView&)> fn) {
    state_->member_fns.push_back(
        std::make_unique<std::function<void(const MemberView&)>>(std::move(fn)));
    Check(ferry_on_membership(
        w_,
        [](void* ud, const ferry_member_t* m) {
          (*static_cast<std::function<void(const MemberView&)>*>(ud))(
              MemberView{m->state, m->id, m->incarnation, m->name, m->transport,
                         FERRY_FIELD_PRESENT(m, ferry_member_t, rank) ? m->rank : -1});
        },
        state_->member_fns.back().get()));
  }
  // What this worker is doing, as JSON text (ferry_worker_debug_dump;
  // docs/debugging.md).
  std::string DebugDump() {
    std::string text(16384, '\0');
    uint64_t len = 0;
    ferry_status_t s;
    while ((s = ferry_worker_debug_dump(w_, text.data(), text.size(), &len)) ==
           FERRY_RESOURCE_EXHAUSTED) {
      text.resize(len + len / 2 + 1);  // it may grow between the calls
    }
    Check(s);
    text.resize(len);
    return text;
  }
  ferry_worker_stats_t Stats() {
    ferry_worker_stats_t s{};
    s.struct_size = FERRY_WORKER_STATS_STRUCT_SIZE;
    Check(ferry_worker_get_stats(w_, &s));
    return s;
  }
  // Graceful, bounded by `timeout` (ferry_worker_shutdown).
  void Shutdown(std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
    Check(ferry_worker_shutdown(w_, static_cast<uint32_t>(timeout.count())));
  }
  // ferry_worker_shutdown_ex: a static job's graceful shutdown is the
  // job-wide barrier, with no time limit unless one is given (as torch's
  // shutdown()); kImmediate leaves at once. Throws ferry::Error (a
  // DEADLINE_EXCEEDED or PEER_GONE naming who did not arrive); the worker
  // has left either way.
  void Shutdown(ShutdownMode mode, std::chrono::milliseconds timeout = kNoTimeout) {
    const uint32_t ms =
        timeout == kNoTimeout ? FERRY_NO_TIMEOUT
        : timeout.count() >= static_cast<int64_t>(FERRY_NO_TIMEOUT)
            ? FERRY_NO_TIMEOUT - 1
            : static_cast<uint32_t>(timeout.count() < 0 ? 0 : timeout.count());
    Check(ferry_worker_shutdown_ex(w_, static_cast<uint32_t>(mode), ms));
  }

 private:
  struct State {
    std::vector<std::unique_ptr<Handler>> handlers;
    std::vector<std::unique_ptr<std::function<void(const MemberView&)>>> member_fns;
  };
  ferry_worker_t* w_ = nullptr;
  std::unique_ptr<State> state_;
};

}  // namespace ferry
