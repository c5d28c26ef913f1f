// Typed C++ functions over ferry (header-only, on ferry.hpp): define a
// function with its own argument and result types, call it with a typed
// future.
//
//   ferry::Define(worker, "add", [](int64_t a, int64_t b) { return a + b; });
//   ferry::TypedFuture<int64_t> f = ferry::CallTyped<int64_t>(w, "server", "add", 2, 3);
//   int64_t five = f.Get();              // or f.Then([](ferry::Result<int64_t> r) {...})
//
// Arguments and results are serialised with msgpack-c++ (Debian's
// libmsgpack-cxx-dev): any type it packs (integers, floats, bool, strings,
// std::vector, std::map, std::tuple, and your structs with MSGPACK_DEFINE).
// A ferry::Tensor (a DLPack tensor) travels as a tensor segment of the
// message, never as serialised bytes: host tensors zero-copy as any ferry
// tensor, device tensors over cuda_ipc.
//
// On the wire (docs/api.md, "Typed functions"): the payload's bytes are the
// marker C1 'F' 'T' '1' (0xC1 never starts a msgpack value), then one msgpack
// value: the arguments as an array, or the result. A tensor is msgpack
// extension type 7 holding its index among the message's tensors (4 bytes,
// big-endian). So Python (ferry.typed.call) and C, which see the raw payload,
// call a typed function where the types allow.
#pragma once

#include <ferry/ferry.hpp>

#include <msgpack.hpp>

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace ferry {

// The bytes a typed payload starts with.
inline constexpr unsigned char kTypedMarker[4] = {0xC1, 'F', 'T', '1'};
// msgpack extension type of a tensor reference.
inline constexpr int8_t kTypedTensorExt = 7;

// An owned DLPack tensor (the deleter runs once, when the last owner drops
// it). Passed to CallTyped or returned by a typed function, it is handed to
// ferry, which sends it without copying and then releases it.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(DLManagedTensor* t) : t_(t) {}
  Tensor(Tensor&& o) noexcept : t_(std::exchange(o.t_, nullptr)) {}
  Tensor& operator=(Tensor&& o) noexcept {
    if (this != &o) {
      reset();
      t_ = std::exchange(o.t_, nullptr);
    }
    return *this;
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor() { reset(); }

  // A tensor over `data`, which stays yours: `release` (may be empty) runs
  // once ferry and every receiver of this process are done with it.
  // Contiguous (row-major); dtype e.g. {kDLFloat, 32, 1}.
  static Tensor FromBuffer(void* data, std::vector<int64_t> shape, DLDataType dtype,
                           DLDevice device = DLDevice{kDLCPU, 0},
                           std::function<void()> release = nullptr) {
    struct Box {
      DLManagedTensor t{};
      std::vector<int64_t> shape;
      std::function<void()> release;
    };
    auto* b = new Box();
    b->shape = std::move(shape);
    b->release = std::move(release);
    b->t.dl_tensor.data = data;
    b->t.dl_tensor.device = device;
    b->t.dl_tensor.ndim = static_cast<int32_t>(b->shape.size());
    b->t.dl_tensor.dtype = dtype;
    b->t.dl_tensor.shape = b->shape.data();
    b->t.manager_ctx = b;
    b->t.deleter = [](DLManagedTensor* self) {
      auto* box = static_cast<Box*>(self->manager_ctx);
      if (box->release) box->release();
      delete box;
    };
    return Tensor(&b->t);
  }

  explicit operator bool() const { return t_ != nullptr; }
  const DLTensor& dl() const { return t_->dl_tensor; }
  template <typename T>
  T* data() const {
    return reinterpret_cast<T*>(static_cast<char*>(t_->dl_tensor.data) +
                                t_->dl_tensor.byte_offset);
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < t_->dl_tensor.ndim; ++i) n *= t_->dl_tensor.shape[i];
    return n;
  }
  // Gives up ownership (the caller must call the deleter).
  DLManagedTensor* release() { return std::exchange(t_, nullptr); }

 private:
  void reset() {
    if (t_ != nullptr && t_->deleter != nullptr) t_->deleter(t_);
    t_ = nullptr;
  }
  DLManagedTensor* t_ = nullptr;
};

// A typed call's outcome: its value, or the error (the status ferry or the
// callee gave, and its message).
template <typename R>
class Result {
 public:
  static Result Of(R value) {
    Result r;
    r.value_.emplace(std::move(value));
    return r;
  }
  static Result Failed(Error e) {
    Result r;
    r.error_ = std::make_shared<Error>(std::move(e));
    return r;
  }
  bool ok() const { return value_.has_value(); }
  ferry_status_t code() const { return ok() ? FERRY_OK : error_->code(); }
  // The value; throws the error when there is none.
  R& value() {
    if (!ok()) throw *error_;
    return *value_;
  }
  const R& value() const {
    if (!ok()) throw *error_;
    return *value_;
  }
  const Error& error() const { return *error_; }

 private:
  std::optional<R> value_;
  std::shared_ptr<Error> error_;
};

// What a function without a result returns.
struct Unit {
  MSGPACK_DEFINE()
};

namespace typed_detail {

// The tensors of the message being packed (out) or unpacked (in), for the
// msgpack adaptors of Tensor below: packing and unpacking run on one thread.
struct TensorScope {
  std::vector<DLManagedTensor*>* out = nullptr;
  Message* in = nullptr;
};
inline TensorScope*& CurrentScope() {
  thread_local TensorScope* scope = nullptr;
  return scope;
}
struct ScopeGuard {
  explicit ScopeGuard(TensorScope* s) : prev(CurrentScope()) { CurrentScope() = s; }
  ~ScopeGuard() { CurrentScope() = prev; }
  TensorScope* prev;
};

template <typename T>
struct TypeName {
  static std::string get() {
    if constexpr (std::is_same_v<T, bool>) {
      return "bool";
    } else if constexpr (std::is_integral_v<T>) {
      return (std::is_signed_v<T> ? "int" : "uint") + std::to_string(8 * sizeof(T));
    } else if constexpr (std::is_floating_point_v<T>) {
      return "float" + std::to_string(8 * sizeof(T));
    } else if constexpr (std::is_same_v<T, std::string>) {
      return "string";
    } else if constexpr (std::is_same_v<T, Tensor>) {
      return "tensor";
    } else {
      return "value";
    }
  }
};
template <typename T>
struct TypeName<std::vector<T>> {
  static std::string get() { return "list[" + TypeName<T>::get() + "]"; }
};
template <typename K, typename V>
struct TypeName<std::map<K, V>> {
  static std::string get() {
    return "map[" + TypeName<K>::get() + ", " + TypeName<V>::get() + "]";
  }
};

template <typename... A>
std::string TypeList() {
  std::string out;
  ((out += (out.empty() ? "" : ", ") + TypeName<A>::get()), ...);
  return "(" + out + ")";
}

// A function's argument and result types.
template <typename F>
struct Signature : Signature<decltype(&F::operator())> {};
template <typename R, typename... A>
struct Signature<R (*)(A...)> {
  using Result = R;
  using Args = std::tuple<std::decay_t<A>...>;
  static std::string Names() { return TypeList<std::decay_t<A>...>(); }
};
template <typename C, typename R, typename... A>
struct Signature<R (C::*)(A...) const> : Signature<R (*)(A...)> {};
template <typename C, typename R, typename... A>
struct Signature<R (C::*)(A...)> : Signature<R (*)(A...)> {};

// marker + msgpack(value), its tensors moved into the payload.
template <typename T>
Payload Pack(const T& value) {
  std::vector<DLManagedTensor*> tensors;
  TensorScope scope{&tensors, nullptr};
  ScopeGuard guard(&scope);
  msgpack::sbuffer buf;
  buf.write(reinterpret_cast<const char*>(kTypedMarker), sizeof kTypedMarker);
  msgpack::pack(buf, value);
  Payload p(std::string(buf.data(), buf.size()));
  for (DLManagedTensor* t : tensors) p.Tensor(t);
  return p;
}

// The msgpack value of a typed payload; INVALID_ARGUMENT naming `what` when
// the bytes are not one.
inline msgpack::object_handle Open(const Message& m, const std::string& what) {
  const std::string_view bytes = m.bytes();
  if (bytes.size() < sizeof kTypedMarker ||
      std::memcmp(bytes.data(), kTypedMarker, sizeof kTypedMarker) != 0) {
    throw Error(FERRY_INVALID_ARGUMENT,
                what +
                    " is not a typed payload (it does not start with ferry's typed "
                    "marker C1 'F' 'T' '1'): call typed functions with CallTyped or "
                    "ferry.typed.call");
  }
  try {
    return msgpack::unpack(bytes.data() + sizeof kTypedMarker,
                           bytes.size() - sizeof kTypedMarker);
  } catch (const std::exception& e) {
    throw Error(FERRY_INVALID_ARGUMENT,
                what + " holds malformed msgpack after the typed marker: " + e.what());
  }
}

// Converts `o` to T, taking tensors from `m`.
template <typename T>
T Convert(const msgpack::object& o, Message& m) {
  TensorScope scope{nullptr, &m};
  ScopeGuard guard(&scope);
  T value{};
  o.convert(value);
  return value;
}

}  // namespace typed_detail
}  // namespace ferry

// msgpack adaptors: a Tensor is an extension value naming a tensor segment.
namespace msgpack {
MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS) {
  namespace adaptor {
  template <>
  struct pack<ferry::Tensor> {
    template <typename Stream>
    packer<Stream>& operator()(packer<Stream>& o, const ferry::Tensor& t) const {
      ferry::typed_detail::TensorScope* s = ferry::typed_detail::CurrentScope();
      if (s == nullptr || s->out == nullptr) {
        throw type_error();  // a Tensor outside a typed call: nowhere to send it
      }
      // Packing hands the tensor to the message (Tensor is move-only; the
      // caller's object is empty afterwards).
      const uint32_t index = static_cast<uint32_t>(s->out->size());
      s->out->push_back(const_cast<ferry::Tensor&>(t).release());
      const char be[4] = {static_cast<char>(index >> 24), static_cast<char>(index >> 16),
                          static_cast<char>(index >> 8), static_cast<char>(index)};
      o.pack_ext(sizeof be, ferry::kTypedTensorExt);
      o.pack_ext_body(be, sizeof be);
      return o;
    }
  };
  template <>
  struct convert<ferry::Tensor> {
    const msgpack::object& operator()(const msgpack::object& o, ferry::Tensor& t) const {
      ferry::typed_detail::TensorScope* s = ferry::typed_detail::CurrentScope();
      if (o.type != type::EXT || o.via.ext.type() != ferry::kTypedTensorExt ||
          o.via.ext.size != 4 || s == nullptr || s->in == nullptr) {
        throw type_error();
      }
      const auto* b = reinterpret_cast<const unsigned char*>(o.via.ext.data());
      const uint32_t index = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) |
                             (uint32_t{b[2]} << 8) | uint32_t{b[3]};
      DLManagedTensor* taken =
          index < s->in->num_tensors() ? s->in->TakeTensor(index) : nullptr;
      if (taken == nullptr) throw type_error();  // no such tensor, or taken twice
      t = ferry::Tensor(taken);
      return o;
    }
  };
  }  // namespace adaptor
}  // MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS)
}  // namespace msgpack

namespace ferry {

// Registers `fn` as typed function `name` on `w`: its arguments are
// unpacked from the call, its result (or Unit for void) packed into the
// reply. An argument list that does not match fails the call with
// INVALID_ARGUMENT naming the types `fn` takes; a ferry::Error thrown by fn
// fails it with that status; any other exception with INTERNAL and its text.
// `flags`: FERRY_HANDLER_MAY_BLOCK for a function that waits or runs long.
template <typename F>
void Define(Worker& w, const std::string& name, F fn, uint32_t flags = 0) {
  using Sig = typed_detail::Signature<std::decay_t<F>>;
  w.Register(
      name,
      [name, fn = std::move(fn)](Call& call, Message args) mutable {
        try {
          msgpack::object_handle oh =
              typed_detail::Open(args, "the arguments of '" + name + "'");
          typename Sig::Args values;
          try {
            const msgpack::object& o = oh.get();
            if (o.type != msgpack::type::ARRAY ||
                o.via.array.size != std::tuple_size_v<typename Sig::Args>) {
              throw msgpack::type_error();
            }
            values = typed_detail::Convert<typename Sig::Args>(o, args);
          } catch (const msgpack::type_error&) {
            throw Error(FERRY_INVALID_ARGUMENT,
                        "'" + name + "' takes " + Sig::Names() +
                            "; the call's arguments do not convert to those types");
          }
          if constexpr (std::is_void_v<typename Sig::Result>) {
            std::apply(fn, std::move(values));
            call.Reply(typed_detail::Pack(Unit{}));
          } else {
            call.Reply(typed_detail::Pack(std::apply(fn, std::move(values))));
          }
        } catch (const Error& e) {
          call.Fail(e.code(), e.what());
        } catch (const std::exception& e) {
          call.Fail(FERRY_INTERNAL, "'" + name + "' threw: " + e.what());
        }
      },
      flags);
}

// The future of a typed call: Get() the value (or the error thrown as
// ferry::Error), Then() a continuation that receives the Result, chained:
// Then returns the future of the continuation's own result.
template <typename R>
class TypedFuture {
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<Result<R>> result;
    std::vector<std::function<void(const Result<R>&)>> then;
    std::unique_ptr<Future> call;  // the ferry call this future decodes, if any
    void Complete(Result<R> r) {
      std::vector<std::function<void(const Result<R>&)>> run;
      {
        std::lock_guard<std::mutex> l(mu);
        if (result) return;
        result.emplace(std::move(r));
        run.swap(then);
      }
      cv.notify_all();
      for (auto& fn : run) fn(*result);
    }
  };

 public:
  // Waits for the outcome and returns the value, or throws its error.
  R Get() {
    Wait();
    std::lock_guard<std::mutex> l(s_->mu);
    return std::move(s_->result->value());
  }
  // The outcome, waiting for it.
  const Result<R>& Wait() {
    std::unique_lock<std::mutex> l(s_->mu);
    s_->cv.wait(l, [&] { return s_->result.has_value(); });
    return *s_->result;
  }
  bool done() const {
    std::lock_guard<std::mutex> l(s_->mu);
    return s_->result.has_value();
  }
  // Gives up on the call (Future::Cancel: CANCELLED here, the callee told).
  bool Cancel() { return s_->call != nullptr && s_->call->Cancel(); }

  // Runs fn(result) once done (here, now, if done already; else on the
  // completing thread, so it must not block) and returns the future of
  // what fn returns (TypedFuture<Unit> for void).
  template <typename Fn>
  auto Then(Fn fn) {
    using U0 = std::invoke_result_t<Fn, const Result<R>&>;
    using U = std::conditional_t<std::is_void_v<U0>, Unit, U0>;
    TypedFuture<U> next;
    auto target = next.s_;
    auto run = [fn = std::move(fn), target](const Result<R>& r) mutable {
      try {
        if constexpr (std::is_void_v<U0>) {
          fn(r);
          target->Complete(Result<U>::Of(Unit{}));
        } else {
          target->Complete(Result<U>::Of(fn(r)));
        }
      } catch (const Error& e) {
        target->Complete(Result<U>::Failed(e));
      } catch (const std::exception& e) {
        target->Complete(Result<U>::Failed(Error(FERRY_INTERNAL, e.what())));
      }
    };
    std::unique_lock<std::mutex> l(s_->mu);
    if (s_->result) {
      l.unlock();
      run(*s_->result);
    } else {
      s_->then.emplace_back(std::move(run));
    }
    return next;
  }

 private:
  template <typename>
  friend class TypedFuture;
  template <typename R2, typename... A>
  friend TypedFuture<R2> CallTyped(Worker&, const std::string&, const std::string&,
                                   std::chrono::milliseconds, A&&...);
  TypedFuture() : s_(std::make_shared<State>()) {}
  std::shared_ptr<State> s_;
};

// Calls typed function `name` on worker `to`, within `timeout` (0: the
// worker's default; deadlines and cancellation as any ferry call). Tensor
// arguments are handed to ferry (moved).
template <typename R, typename... A>
TypedFuture<R> CallTyped(Worker& w, const std::string& to, const std::string& name,
                         std::chrono::milliseconds timeout, A&&... args) {
  TypedFuture<R> out;
  auto state = out.s_;
  Payload payload = typed_detail::Pack(std::forward_as_tuple(std::forward<A>(args)...));
  try {
    state->call =
        std::make_unique<Future>(w.RpcAsync(to, name, std::move(payload), timeout));
  } catch (const Error& e) {
    state->Complete(Result<R>::Failed(e));
    return out;
  }
  // The continuation holds the state (and so the Future) until it ran.
  state->call->Then([state, name] {
    try {
      Message m = state->call->Get();
      msgpack::object_handle oh = typed_detail::Open(m, "the result of '" + name + "'");
      try {
        state->Complete(Result<R>::Of(typed_detail::Convert<R>(oh.get(), m)));
      } catch (const msgpack::type_error&) {
        throw Error(FERRY_INVALID_ARGUMENT, "the result of '" + name + "' is not a " +
                                                typed_detail::TypeName<R>::get());
      }
    } catch (const Error& e) {
      state->Complete(Result<R>::Failed(e));
    }
  });
  return out;
}

template <typename R, typename... A>
TypedFuture<R> CallTyped(Worker& w, const std::string& to, const std::string& name,
                         A&&... args) {
  return CallTyped<R>(w, to, name, std::chrono::milliseconds(0),
                      std::forward<A>(args)...);
}

}  // namespace ferry
