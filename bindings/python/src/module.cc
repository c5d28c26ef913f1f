// _ferry: the Python extension over ferry's public C API (ferry.h), and
// nothing else. It stays thin on purpose: it owns C handles, moves DLPack
// tensors, and releases the GIL around every ferry call (a ferry call may
// wait on the network, and ferry's threads may need the GIL to finish the
// work this call waits for). The torch-like API is Python (ferry/*.py).
#include <ferry/ferry.h>
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dispatcher.h"
#include "tensors.h"
#include "thread_gil.h"

namespace py = pybind11;

namespace ferry_py {
namespace {

// A failed ferry call, raised in Python as the exception ferry._errors
// makes for the status (PeerGoneError, TimeoutError, ...).
struct FerryError {
  ferry_status_t code;
  std::string message;
};

[[noreturn]] void ThrowLast(ferry_status_t s) {
  throw FerryError{s, ferry_last_error()};
}
void Check(ferry_status_t s) {
  if (s != FERRY_OK) ThrowLast(s);
}

// Waits in slices, so Ctrl-C reaches a Python thread that waits long.
constexpr uint32_t kWaitSliceMs = 100;
constexpr uint32_t kForever = UINT32_MAX;

// ---- payloads --------------------------------------------------------------

class RRefHandle;

// A ferry_payload_t built from Python parts. Tensors not handed to ferry
// are freed when it goes (ferry takes them on any call, failed or not).
// Each tensor part is a "dltensor" capsule, a (capsule, producer) pair (a
// device tensor: the producer is kept alive until ferry frees it), or a
// buffer (tensors.h). Device tensors were exported on the legacy default
// stream (ferry/_pickling.py), so the payload's stream says that. The
// tensors list may carry a `zero_copy` int (_pickling.Tensors): the
// payload's zero_copy mask (ferry.h), which host tensors go uncopied.
class Payload {
 public:
  Payload(const py::bytes& data, const py::list& tensors, const py::list& rrefs);
  ~Payload() {
    for (DLManagedTensor* t : tensors_) FreeTensor(t);
  }
  Payload(const Payload&) = delete;
  Payload& operator=(const Payload&) = delete;
  // The C struct; after the call that uses it, call Given().
  const ferry_payload_t* c() { return &c_; }
  void Given() { tensors_.clear(); }

 private:
  // The caller's bytes object, referenced rather than copied: a Python
  // bytes object is immutable and this reference keeps it alive, so its
  // buffer can be read without the GIL while ferry encodes the call.
  py::bytes bytes_;
  std::vector<DLManagedTensor*> tensors_;
  std::vector<ferry_rref_t*> rrefs_;
  ferry_payload_t c_{};
};

// ---- RRefs -----------------------------------------------------------------

class RRefHandle {
 public:
  explicit RRefHandle(ferry_rref_t* r) : r_(r) {}
  ~RRefHandle() { Release(); }
  void Release() {
    if (r_ == nullptr) return;
    ferry_rref_t* r = r_;
    r_ = nullptr;
    py::gil_scoped_release nogil;
    ferry_rref_release(r);
  }
  ferry_rref_t* get() const {
    if (r_ == nullptr) throw py::value_error("ferry: this RRef was released");
    return r_;
  }

 private:
  ferry_rref_t* r_;
};

// Runs `call` (a ferry function given the payload) without the GIL. The
// payload's tensors are ferry's afterwards, whatever the outcome.
template <typename Call>
void GiveToFerry(Payload& p, Call&& call) {
  ferry_status_t s;
  {
    py::gil_scoped_release nogil;
    s = call(p.c());
  }
  p.Given();
  Check(s);
}

Payload::Payload(const py::bytes& data, const py::list& tensors, const py::list& rrefs)
    : bytes_(data) {
  bool device = false;
  try {
    for (py::handle t : tensors) {
      DLManagedTensor* dl;
      if (PyCapsule_CheckExact(t.ptr())) {
        dl = TensorFromCapsule(t);
      } else if (PyTuple_CheckExact(t.ptr()) && PyTuple_GET_SIZE(t.ptr()) == 2) {
        dl =
            TensorFromCapsule(PyTuple_GET_ITEM(t.ptr(), 0), PyTuple_GET_ITEM(t.ptr(), 1));
      } else {
        dl = TensorFromBuffer(t);
      }
      tensors_.push_back(dl);
      device = device || !IsHostMemory(dl->dl_tensor.device);
    }
    for (py::handle r : rrefs) rrefs_.push_back(r.cast<RRefHandle&>().get());
  } catch (...) {
    // The destructor does not run for a constructor that throws.
    for (DLManagedTensor* t : tensors_) FreeTensor(t);
    throw;
  }
  c_.struct_size = FERRY_PAYLOAD_STRUCT_SIZE;
  c_.bytes = PyBytes_AS_STRING(bytes_.ptr());
  c_.num_bytes = static_cast<uint64_t>(PyBytes_GET_SIZE(bytes_.ptr()));
  c_.num_tensors = static_cast<uint32_t>(tensors_.size());
  c_.tensors = tensors_.data();
  c_.rrefs = rrefs_.data();
  c_.num_rrefs = static_cast<uint32_t>(rrefs_.size());
  c_.stream = device ? FERRY_STREAM_LEGACY : FERRY_STREAM_READY;
  if (!tensors_.empty() && !PyList_CheckExact(tensors.ptr())) {
    py::object mask = py::getattr(tensors, "zero_copy", py::none());
    if (!mask.is_none()) c_.zero_copy = mask.cast<uint64_t>();
  }
}

// ---- messages --------------------------------------------------------------

// A received payload. A handler's arguments are borrowed: valid only while
// the handler runs (Invalidate() after).
class MessageHandle {
 public:
  MessageHandle(ferry_message_t* m, bool owned) : m_(m), owned_(owned) {}
  ~MessageHandle() {
    if (owned_ && m_ != nullptr) ferry_message_release(m_);
  }
  void Invalidate() { m_ = nullptr; }
  ferry_message_t* get() const {
    if (m_ == nullptr) {
      throw py::value_error("ferry: a handler's arguments are valid only while it runs");
    }
    return m_;
  }
  py::bytes Data() const {
    uint64_t n = 0;
    const void* p = ferry_message_bytes(get(), &n);
    return py::bytes(static_cast<const char*>(p), n);
  }
  uint32_t NumTensors() const { return ferry_message_num_tensors(get()); }
  uint32_t NumRRefs() const { return ferry_message_num_rrefs(get()); }
  DLManagedTensor* Take(uint32_t i) const {
    DLManagedTensor* t = ferry_message_take_tensor(get(), i);
    if (t == nullptr)
      throw py::index_error("ferry: tensor " + std::to_string(i) +
                            " was taken or is out of range");
    return t;
  }
  py::object TakeNumpy(uint32_t i) const { return NumpyFromTensor(Take(i)); }
  py::object TakeCapsule(uint32_t i) const { return CapsuleFromTensor(Take(i)); }
  // A tensor in device memory as a DeviceTensor; one in host memory as a
  // numpy array (as_numpy) or a capsule.
  py::object TakeAny(uint32_t i, bool as_numpy) const {
    DLManagedTensor* t = Take(i);
    if (!IsHostMemory(t->dl_tensor.device)) return DeviceTensorFromTensor(t);
    return as_numpy ? NumpyFromTensor(t) : CapsuleFromTensor(t);
  }
  std::shared_ptr<RRefHandle> TakeRRef(uint32_t i) const {
    ferry_rref_t* r = ferry_message_take_rref(get(), i);
    if (r == nullptr)
      throw py::index_error("ferry: RRef " + std::to_string(i) +
                            " was taken or is out of range");
    return std::make_shared<RRefHandle>(r);
  }

 private:
  ferry_message_t* m_;
  bool owned_;
};

// ---- futures ---------------------------------------------------------------

class FutureHandle : public std::enable_shared_from_this<FutureHandle> {
 public:
  explicit FutureHandle(ferry_future_t* f) : f_(f) {}
  ~FutureHandle() { ferry_future_release(f_); }

  // True once done; false if still pending after timeout_ms.
  bool Wait(uint32_t timeout_ms) {
    uint32_t left = timeout_ms;
    while (true) {
      const uint32_t slice = std::min(left, kWaitSliceMs);
      ferry_status_t s;
      {
        py::gil_scoped_release nogil;
        s = ferry_future_wait(f_, slice);
      }
      if (s == FERRY_OK) return true;
      if (s != FERRY_DEADLINE_EXCEEDED) ThrowLast(s);
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      if (timeout_ms != kForever) {
        left -= slice;
        if (left == 0) return false;
      }
    }
  }
  bool Done() const { return ferry_future_is_done(f_) != 0; }
  // Gives up on the call: false if it was done already.
  bool Cancel() {
    py::gil_scoped_release nogil;
    return ferry_future_cancel(f_) == FERRY_OK;
  }
  // (code, message) of the outcome; code FERRY_UNAVAILABLE while pending.
  py::tuple Status() const {
    const char* msg = nullptr;
    ferry_status_t s = ferry_future_status(f_, &msg);
    return py::make_tuple(s, msg != nullptr ? msg : "");
  }
  std::shared_ptr<MessageHandle> Take() {
    ferry_message_t* m = nullptr;
    Check(ferry_future_take(f_, &m));
    return std::make_shared<MessageHandle>(m, true);
  }
  // Calls fn() on the dispatcher thread once done (never on the caller's).
  void Then(py::function fn) {
    struct Ctx {
      std::shared_ptr<FutureHandle> keep;  // f must outlive the callback
      PyObject* fn;
    };
    auto* ctx = new Ctx{shared_from_this(), fn.inc_ref().ptr()};
    ferry_status_t s;
    {
      py::gil_scoped_release nogil;
      s = ferry_future_then(
          f_,
          [](void* ud, ferry_future_t*) {
            auto* c = static_cast<Ctx*>(ud);
            Dispatcher::Get().Post([c] {
              py::object f = py::reinterpret_steal<py::object>(c->fn);
              delete c;
              f();
            });
          },
          ctx);
    }
    if (s != FERRY_OK) {
      Py_DECREF(ctx->fn);
      delete ctx;
      ThrowLast(s);
    }
  }

 private:
  ferry_future_t* f_;
};

// ---- calls -----------------------------------------------------------------

class CallHandle {
 public:
  explicit CallHandle(ferry_call_t* c)
      : c_(c),
        caller_id_(ferry_call_caller_id(c)),
        caller_name_(ferry_call_caller_name(c)),
        remaining_ms_(ferry_call_remaining_ms(c)) {}
  ~CallHandle() {
    if (c_ != nullptr) {
      ferry_call_t* c = c_;
      c_ = nullptr;
      py::gil_scoped_release nogil;
      ferry_call_fail(c, FERRY_INTERNAL,
                      "the Python handler dropped its call without answering it");
    }
  }
  bool Pending() const { return c_ != nullptr; }
  void Reply(const py::bytes& data, const py::list& tensors, const py::list& rrefs) {
    Payload p(data, tensors, rrefs);
    ferry_call_t* c = Take();
    GiveToFerry(p, [c](const ferry_payload_t* pc) { return ferry_call_reply(c, pc); });
  }
  void Fail(ferry_status_t code, const std::string& message) {
    ferry_call_t* c = Take();
    py::gil_scoped_release nogil;
    Check(ferry_call_fail(c, code, message.c_str()));
  }
  uint64_t caller_id() const { return caller_id_; }
  const std::string& caller_name() const { return caller_name_; }
  // The caller's deadline as milliseconds left when the handler started
  // (kForever: none).
  uint32_t remaining_ms() const { return remaining_ms_; }
  // Whether the caller gave up; once answered, what it was then.
  bool Cancelled() {
    if (c_ != nullptr && !cancelled_) cancelled_ = ferry_call_cancelled(c_) != 0;
    return cancelled_;
  }

 private:
  ferry_call_t* Take() {
    Cancelled();
    if (c_ == nullptr) throw py::value_error("ferry: this call was answered already");
    ferry_call_t* c = c_;
    c_ = nullptr;
    return c;
  }
  ferry_call_t* c_;
  uint64_t caller_id_;
  std::string caller_name_;
  uint32_t remaining_ms_;
  bool cancelled_ = false;
};

// ---- workers ---------------------------------------------------------------

// A registered Python function: the callable, kept while the worker lives.
struct Handler {
  PyObject* fn;
};

void RunHandler(void* user_data, ferry_call_t* call, ferry_message_t* args) {
  auto* h = static_cast<Handler*>(user_data);
  FerryThreadGil gil;
  auto c = std::make_shared<CallHandle>(call);
  auto m = std::make_shared<MessageHandle>(args, false);
  try {
    py::handle(h->fn)(c, m);
  } catch (py::error_already_set& e) {
    // The Python layer answers failures itself; this is a bug in it.
    if (c->Pending())
      c->Fail(FERRY_INTERNAL,
              "ferry's Python dispatcher failed: " + std::string(e.what()));
  }
  m->Invalidate();
}

struct WorkerOptions {
  std::string name, job, transport, store, secret;
  bool host_store = false, busy_poll = false;
  uint32_t default_timeout_ms = 0, peer_timeout_ms = 0, join_timeout_ms = 0,
           executor_threads = 0;
  // A static job: world_size > 0 and this worker's rank. world_size 0 and
  // elastic: an elastic job whatever WORLD_SIZE says (the Python layer
  // reads torchrun's environment itself).
  uint32_t world_size = 0, start_timeout_ms = 0;
  int32_t rank = -1;
  bool elastic = false;
  // ferry_limits_t's fields (docs/limits.md); 0 = the environment's, else
  // the default.
  uint64_t max_message_size = 0, max_queued_bytes_per_connection = 0;
  uint32_t max_calls_in_flight_per_peer = 0, max_queued_calls = 0, max_connections = 0,
           handshake_timeout_ms = 0;
};

// A member's rank (0.2; -1 from a library whose members end at transport).
int32_t MemberRank(const ferry_member_t& m) {
  return m.struct_size >= FERRY_MEMBER_STRUCT_SIZE ? m.rank : -1;
}

class WorkerHandle {
 public:
  explicit WorkerHandle(const WorkerOptions& o) {
    ferry_worker_options_t c{};
    c.struct_size = FERRY_WORKER_OPTIONS_STRUCT_SIZE;
    c.flags = (o.host_store ? FERRY_WORKER_HOST_STORE : 0) |
              (o.busy_poll ? FERRY_WORKER_BUSY_POLL : 0) |
              (o.elastic ? FERRY_WORKER_ELASTIC : 0);
    c.name = o.name.c_str();
    c.job = o.job.empty() ? nullptr : o.job.c_str();
    c.transport = o.transport.empty() ? nullptr : o.transport.c_str();
    c.store_address = o.store.empty() ? nullptr : o.store.c_str();
    c.secret = o.secret.empty() ? nullptr : o.secret.c_str();
    c.default_timeout_ms = o.default_timeout_ms;
    c.peer_timeout_ms = o.peer_timeout_ms;
    c.join_timeout_ms = o.join_timeout_ms;
    c.executor_threads = o.executor_threads;
    c.world_size = o.world_size;
    c.rank = o.rank;
    c.start_timeout_ms = o.start_timeout_ms;
    ferry_limits_t limits{};
    limits.struct_size = FERRY_LIMITS_STRUCT_SIZE;
    limits.max_message_size = o.max_message_size;
    limits.max_calls_in_flight_per_peer = o.max_calls_in_flight_per_peer;
    limits.max_queued_bytes_per_connection = o.max_queued_bytes_per_connection;
    limits.max_queued_calls = o.max_queued_calls;
    limits.max_connections = o.max_connections;
    limits.handshake_timeout_ms = o.handshake_timeout_ms;
    c.limits = &limits;
    ferry_status_t s;
    {
      py::gil_scoped_release nogil;
      s = ferry_worker_start(&c, &w_);
    }
    Check(s);
  }
  ~WorkerHandle() { Destroy(); }

  void Destroy() {
    if (w_ == nullptr) return;
    ferry_worker_t* w = w_;
    w_ = nullptr;
    {
      // Handlers and callbacks still running need the GIL to finish.
      py::gil_scoped_release nogil;
      ferry_worker_destroy(w);
    }
    for (Handler* h : handlers_) {
      Py_DECREF(h->fn);
      delete h;
    }
    handlers_.clear();
    if (membership_fn_ != nullptr) {
      // Callbacks already queued hold no reference: drop ours on the
      // dispatcher thread, after them.
      PyObject* fn = membership_fn_;
      membership_fn_ = nullptr;
      if (!Dispatcher::Get().Post([fn] { Py_DECREF(fn); })) Py_DECREF(fn);
    }
  }
  ferry_worker_t* get() const {
    if (w_ == nullptr)
      throw FerryError{FERRY_FAILED_PRECONDITION,
                       "ferry: this worker was shut down; call init_rpc() to start one"};
    return w_;
  }

  // graceful: a static job's barrier first (FERRY_NO_TIMEOUT: no limit),
  // then the leave; else FERRY_SHUTDOWN_IMMEDIATE.
  void Shutdown(uint32_t timeout_ms, bool graceful) {
    ferry_worker_t* w = get();
    py::gil_scoped_release nogil;
    Check(ferry_worker_shutdown_ex(
        w, graceful ? FERRY_SHUTDOWN_GRACEFUL : FERRY_SHUTDOWN_IMMEDIATE, timeout_ms));
  }
  uint64_t Id() const { return ferry_worker_id(get()); }
  int32_t Rank() const { return ferry_worker_rank(get()); }
  uint32_t WorldSize() const { return ferry_worker_world_size(get()); }
  std::string Name() const { return ferry_worker_name(get()); }
  std::string StoreAddress() const { return ferry_worker_store_address(get()); }

  // [(state, id, incarnation, name, transport, rank)], live ones first
  // (rank -1 in an elastic job).
  py::list Members() const {
    ferry_worker_t* w = get();
    std::vector<ferry_member_t> out(64);
    uint32_t count = 0;
    while (true) {
      for (auto& m : out) m.struct_size = FERRY_MEMBER_STRUCT_SIZE;
      ferry_status_t s;
      {
        py::gil_scoped_release nogil;
        s = ferry_worker_members(w, out.data(), static_cast<uint32_t>(out.size()),
                                 &count);
      }
      Check(s);
      if (count <= out.size()) break;
      out.resize(count);
    }
    py::list result;
    for (uint32_t i = 0; i < count; ++i) {
      const ferry_member_t& m = out[i];
      result.append(py::make_tuple(m.state, m.id, m.incarnation, std::string(m.name),
                                   std::string(m.transport), MemberRank(m)));
    }
    return result;
  }
  void WaitForWorkers(uint32_t n, uint32_t timeout_ms) {
    ferry_worker_t* w = get();
    py::gil_scoped_release nogil;
    Check(ferry_wait_for_workers(w, n, timeout_ms));
  }
  // fn(state, id, incarnation, name, transport, rank), on the dispatcher
  // thread.
  void OnMembership(py::function fn) {
    if (membership_fn_ != nullptr)
      throw py::value_error("ferry: a membership callback is set already");
    membership_fn_ = fn.inc_ref().ptr();
    ferry_worker_t* w = get();
    ferry_status_t s;
    {
      py::gil_scoped_release nogil;
      s = ferry_on_membership(
          w,
          [](void* ud, const ferry_member_t* m) {
            auto* self = static_cast<WorkerHandle*>(ud);
            PyObject* callback = self->membership_fn_;
            if (callback == nullptr) return;
            Dispatcher::Get().Post([callback, state = m->state, id = m->id,
                                    inc = m->incarnation, name = std::string(m->name),
                                    transport = std::string(m->transport),
                                    rank = MemberRank(*m)] {
              py::handle target(callback);
              target(state, id, inc, name, transport, rank);
            });
          },
          this);
    }
    Check(s);
  }

  void Register(const std::string& name, py::function fn, bool may_block) {
    auto* h = new Handler{fn.inc_ref().ptr()};
    ferry_worker_t* w = get();
    ferry_status_t s;
    {
      py::gil_scoped_release nogil;
      s = ferry_register(w, name.c_str(), RunHandler, h,
                         may_block ? FERRY_HANDLER_MAY_BLOCK : 0);
    }
    if (s != FERRY_OK) {
      Py_DECREF(h->fn);
      delete h;
      ThrowLast(s);
    }
    handlers_.push_back(h);
  }

  std::shared_ptr<FutureHandle> RpcAsync(const std::string& to,
                                         const std::string& function,
                                         const py::bytes& data, const py::list& tensors,
                                         const py::list& rrefs, uint32_t timeout_ms) {
    Payload p(data, tensors, rrefs);
    ferry_worker_t* w = get();
    ferry_future_t* f = nullptr;
    GiveToFerry(p, [&](const ferry_payload_t* pc) {
      return ferry_rpc_async(w, to.c_str(), function.c_str(), pc, timeout_ms, &f);
    });
    return std::make_shared<FutureHandle>(f);
  }

  std::shared_ptr<RRefHandle> Remote(const std::string& to, const std::string& function,
                                     const py::bytes& data, const py::list& tensors,
                                     const py::list& rrefs, uint32_t timeout_ms) {
    Payload p(data, tensors, rrefs);
    ferry_worker_t* w = get();
    ferry_rref_t* r = nullptr;
    GiveToFerry(p, [&](const ferry_payload_t* pc) {
      return ferry_remote(w, to.c_str(), function.c_str(), pc, timeout_ms, &r);
    });
    return std::make_shared<RRefHandle>(r);
  }

  std::shared_ptr<RRefHandle> CreateRRef(const py::bytes& data, const py::list& tensors,
                                         const py::list& rrefs) {
    Payload p(data, tensors, rrefs);
    ferry_worker_t* w = get();
    ferry_rref_t* r = nullptr;
    GiveToFerry(p,
                [&](const ferry_payload_t* pc) { return ferry_rref_create(w, pc, &r); });
    return std::make_shared<RRefHandle>(r);
  }

  // ferry_worker_debug_dump: the JSON text (docs/debugging.md).
  std::string DebugDump() const {
    std::string text(16384, '\0');
    uint64_t len = 0;
    ferry_status_t s;
    {
      py::gil_scoped_release nogil;
      while ((s = ferry_worker_debug_dump(get(), text.data(), text.size(), &len)) ==
             FERRY_RESOURCE_EXHAUSTED) {
        text.resize(len + len / 2 + 1);  // it may grow between the calls
      }
    }
    Check(s);
    text.resize(len);
    return text;
  }

  py::dict Stats() const {
    ferry_worker_stats_t st{};
    st.struct_size = FERRY_WORKER_STATS_STRUCT_SIZE;
    Check(ferry_worker_get_stats(get(), &st));
    py::dict d;
    d["owned_rrefs"] = st.owned_rrefs;
    d["user_rrefs"] = st.user_rrefs;
    d["pending_children"] = st.pending_children;
    d["pending_controls"] = st.pending_controls;
    d["pending_calls"] = st.pending_calls;
    d["dropped_calls"] = st.dropped_calls;
    d["refused_connections"] = st.refused_connections;
    d["snapshot_tensors"] = st.snapshot_tensors;
    d["snapshot_bytes"] = st.snapshot_bytes;
    return d;
  }

 private:
  ferry_worker_t* w_ = nullptr;
  std::vector<Handler*> handlers_;
  PyObject* membership_fn_ = nullptr;
};

// ---- RRef operations (need the Python object as a numpy base) ---------------

std::shared_ptr<MessageHandle> RRefToHere(RRefHandle& r, uint32_t timeout_ms) {
  ferry_rref_t* h = r.get();
  ferry_message_t* m = nullptr;
  ferry_status_t s;
  {
    py::gil_scoped_release nogil;
    s = ferry_rref_to_here(h, timeout_ms, &m);
  }
  Check(s);
  return std::make_shared<MessageHandle>(m, true);
}

// Owner only: (bytes, [numpy views of the value's tensors]) where the value
// came from C, or (bytes, held object) where Python made it. The views are
// writable in place and keep `self` (the RRef) alive.
py::tuple RRefLocalValue(py::object self, uint32_t timeout_ms) {
  RRefHandle& r = self.cast<RRefHandle&>();
  ferry_rref_t* h = r.get();
  void* bytes = nullptr;
  uint64_t num_bytes = 0;
  DLTensor* tensors = nullptr;
  uint32_t num_tensors = 0;
  ferry_status_t s;
  {
    py::gil_scoped_release nogil;
    s = ferry_rref_local_value(h, timeout_ms, &bytes, &num_bytes, &tensors, &num_tensors);
  }
  Check(s);
  py::bytes data(static_cast<const char*>(bytes), num_bytes);
  static const char kHeld[] = "FPYH";  // ferry/_rref.py: a held Python object
  if (num_bytes == 4 && std::memcmp(bytes, kHeld, 4) == 0 && num_tensors == 1) {
    return py::make_tuple(data, HeldObject(tensors[0]));
  }
  py::list views;
  for (uint32_t i = 0; i < num_tensors; ++i) views.append(NumpyView(tensors[i], self));
  return py::make_tuple(data, views);
}

}  // namespace
}  // namespace ferry_py

PYBIND11_MODULE(_ferry, m) {
  using namespace ferry_py;
  m.doc() = "ferry's C API for Python; use the `ferry` package, not this module";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const FerryError& e) {
      py::object make = py::module_::import("ferry._errors").attr("from_status");
      py::object exc = make(e.code, e.message);
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    }
  });

  m.def("api_version", [] {
    const uint32_t v = ferry_api_version();
    return py::make_tuple(v >> 16, v & 0xffff);
  });
  m.def(
      "stop_dispatcher", [] { Dispatcher::Get().Stop(); },
      "Runs queued callbacks and stops their thread (at interpreter exit).");
  m.def(
      "holder_tensor",
      [](py::object value) { return CapsuleFromTensor(TensorHoldingObject(value)); },
      "A 'dltensor' capsule holding `value` alive: an RRef value kept as the object.");

  BindTensors(m);
  m.def(
      "_device_tensor",
      [](py::capsule c) {
        if (!PyCapsule_IsValid(c.ptr(), "dltensor"))
          throw py::type_error("ferry: expected an unused 'dltensor' capsule");
        auto* t =
            static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c.ptr(), "dltensor"));
        if (PyCapsule_SetName(c.ptr(), "used_dltensor") != 0)
          throw py::error_already_set();
        return DeviceTensorFromTensor(t);
      },
      "For tests: a DeviceTensor taking a capsule's tensor, as if it had arrived.");

  py::class_<WorkerOptions>(m, "WorkerOptions")
      .def(py::init<>())
      .def_readwrite("name", &WorkerOptions::name)
      .def_readwrite("job", &WorkerOptions::job)
      .def_readwrite("transport", &WorkerOptions::transport)
      .def_readwrite("store", &WorkerOptions::store)
      .def_readwrite("secret", &WorkerOptions::secret)
      .def_readwrite("host_store", &WorkerOptions::host_store)
      .def_readwrite("busy_poll", &WorkerOptions::busy_poll)
      .def_readwrite("default_timeout_ms", &WorkerOptions::default_timeout_ms)
      .def_readwrite("peer_timeout_ms", &WorkerOptions::peer_timeout_ms)
      .def_readwrite("join_timeout_ms", &WorkerOptions::join_timeout_ms)
      .def_readwrite("executor_threads", &WorkerOptions::executor_threads)
      .def_readwrite("world_size", &WorkerOptions::world_size)
      .def_readwrite("rank", &WorkerOptions::rank)
      .def_readwrite("start_timeout_ms", &WorkerOptions::start_timeout_ms)
      .def_readwrite("elastic", &WorkerOptions::elastic)
      .def_readwrite("max_message_size", &WorkerOptions::max_message_size)
      .def_readwrite("max_calls_in_flight_per_peer",
                     &WorkerOptions::max_calls_in_flight_per_peer)
      .def_readwrite("max_queued_bytes_per_connection",
                     &WorkerOptions::max_queued_bytes_per_connection)
      .def_readwrite("max_queued_calls", &WorkerOptions::max_queued_calls)
      .def_readwrite("max_connections", &WorkerOptions::max_connections)
      .def_readwrite("handshake_timeout_ms", &WorkerOptions::handshake_timeout_ms);

  py::class_<RRefHandle, std::shared_ptr<RRefHandle>>(m, "RRef")
      .def("release", &RRefHandle::Release)
      .def("is_owner", [](RRefHandle& r) { return ferry_rref_is_owner(r.get()) != 0; })
      .def("owner_id", [](RRefHandle& r) { return ferry_rref_owner_id(r.get()); })
      .def("confirmed_by_owner",
           [](RRefHandle& r) { return ferry_rref_confirmed_by_owner(r.get()) != 0; })
      .def("ids",
           [](RRefHandle& r) {
             char rid[64], fid[64];
             ferry_rref_ids(r.get(), rid, fid, sizeof(rid));
             return py::make_tuple(std::string(rid), std::string(fid));
           })
      .def("to_here", &RRefToHere)
      .def("local_value", &RRefLocalValue)
      .def("set_local_value",
           [](RRefHandle& r, const py::bytes& data, const py::list& tensors) {
             Payload p(data, tensors, py::list());
             ferry_rref_t* h = r.get();
             GiveToFerry(p, [h](const ferry_payload_t* pc) {
               return ferry_rref_set_local_value(h, pc);
             });
           });

  py::class_<MessageHandle, std::shared_ptr<MessageHandle>>(m, "Message")
      .def("data", &MessageHandle::Data)
      .def("num_tensors", &MessageHandle::NumTensors)
      .def("num_rrefs", &MessageHandle::NumRRefs)
      .def("take_numpy", &MessageHandle::TakeNumpy)
      .def("take_capsule", &MessageHandle::TakeCapsule)
      .def("take", &MessageHandle::TakeAny, py::arg("index"), py::arg("as_numpy"))
      .def("take_rref", &MessageHandle::TakeRRef);

  py::class_<FutureHandle, std::shared_ptr<FutureHandle>>(m, "Future")
      .def("wait", &FutureHandle::Wait, py::arg("timeout_ms"))
      .def("done", &FutureHandle::Done)
      .def("cancel", &FutureHandle::Cancel)
      .def("status", &FutureHandle::Status)
      .def("take", &FutureHandle::Take)
      .def("then", &FutureHandle::Then);

  py::class_<CallHandle, std::shared_ptr<CallHandle>>(m, "Call")
      .def("reply", &CallHandle::Reply)
      .def("fail", &CallHandle::Fail)
      .def("pending", &CallHandle::Pending)
      .def_property_readonly("caller_id", &CallHandle::caller_id)
      .def_property_readonly("caller_name", &CallHandle::caller_name)
      .def_property_readonly("remaining_ms", &CallHandle::remaining_ms)
      .def("cancelled", &CallHandle::Cancelled);

  py::class_<WorkerHandle>(m, "Worker")
      .def(py::init<const WorkerOptions&>())
      .def("destroy", &WorkerHandle::Destroy)
      .def("shutdown", &WorkerHandle::Shutdown, py::arg("timeout_ms"),
           py::arg("graceful") = true)
      .def("id", &WorkerHandle::Id)
      .def("rank", &WorkerHandle::Rank)
      .def("world_size", &WorkerHandle::WorldSize)
      .def("name", &WorkerHandle::Name)
      .def("store_address", &WorkerHandle::StoreAddress)
      .def("members", &WorkerHandle::Members)
      .def("wait_for_workers", &WorkerHandle::WaitForWorkers)
      .def("on_membership", &WorkerHandle::OnMembership)
      .def("register", &WorkerHandle::Register)
      .def("rpc_async", &WorkerHandle::RpcAsync)
      .def("remote", &WorkerHandle::Remote)
      .def("create_rref", &WorkerHandle::CreateRRef)
      .def("stats", &WorkerHandle::Stats)
      .def("debug_dump", &WorkerHandle::DebugDump);

  m.attr("FOREVER") = kForever;
  // The C headers' constants, so that the Python layer never copies them.
  for (const auto& [name, code] : std::initializer_list<std::pair<const char*, int>>{
           {"OK", FERRY_OK},
           {"CANCELLED", FERRY_CANCELLED},
           {"UNKNOWN", FERRY_UNKNOWN},
           {"INVALID_ARGUMENT", FERRY_INVALID_ARGUMENT},
           {"DEADLINE_EXCEEDED", FERRY_DEADLINE_EXCEEDED},
           {"NOT_FOUND", FERRY_NOT_FOUND},
           {"ALREADY_EXISTS", FERRY_ALREADY_EXISTS},
           {"PERMISSION_DENIED", FERRY_PERMISSION_DENIED},
           {"RESOURCE_EXHAUSTED", FERRY_RESOURCE_EXHAUSTED},
           {"FAILED_PRECONDITION", FERRY_FAILED_PRECONDITION},
           {"ABORTED", FERRY_ABORTED},
           {"INTERNAL", FERRY_INTERNAL},
           {"UNAVAILABLE", FERRY_UNAVAILABLE},
           {"UNAUTHENTICATED", FERRY_UNAUTHENTICATED},
           {"PEER_GONE", FERRY_PEER_GONE},
           {"MEMBER_ALIVE", FERRY_MEMBER_ALIVE},
           {"MEMBER_LEFT", FERRY_MEMBER_LEFT},
           {"MEMBER_GONE", FERRY_MEMBER_GONE}}) {
    m.attr(name) = code;
  }
}
