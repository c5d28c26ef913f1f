// The one entry shim of ferry's in-tree plugins: the exported negotiation
// function and the vtable behind it. A plugin states its name, version and
// features and which of its functions fills each vtable slot; every slot then
// runs that function inside the one exception guard below, so a C++
// exception never crosses the ABI (it becomes FERRY_INTERNAL, a message in
// the caller's error buffer and a line in the host's log), and a failing
// Status becomes the caller's error message. The plugin's functions keep
// their handle and argument checks and their locking; this file adds only
// the guard.
//
// Everything here is an inline template instantiated in the plugin's own
// entry file: the guard costs a hot call (send, progress) no call, no
// std::function and no indirection beyond the vtable's own pointer. With
// link-time optimisation (cmake/FerryPlugin.cmake) the plugin's function is
// inlined into its slot as well.
//
// A plugin's entry file:
//
//   struct TcpPlugin {
//     static constexpr ferry_plugin::PluginInfo kInfo = {
//         "tcp", "0.1.0", 1, FERRY_TRANSPORT_ABI_MINOR, FERRY_FEATURE_MULTI_CONTEXT};
//     static constexpr auto init = host_calls::Init;
//     ...
//     static constexpr auto reg = nullptr;  // an optional slot left empty
//   };
//
// A plugin that moves device memory also names mem_alloc, mem_free and
// mem_copy (ABI 0.2); one that does not simply leaves them out.
//   FERRY_PLUGIN_ENTRY(TcpPlugin)
//
// The functions take the slot's arguments without the error buffer and may
// throw. Each returns a Status, or (for hot calls, so that success builds no
// Status) a bare ferry_status_t with a `Status* error` as its last argument,
// filled only when the call fails; the slots that return nothing take
// functions returning void. Messages are prefixed with PluginName() (host.h).
#pragma once

#include "ferry_plugin/host.h"
#include "ferry_plugin/status.h"

#include <ferry/transport.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <type_traits>

namespace ferry_plugin {

// What a plugin answers at negotiation besides its vtable.
struct PluginInfo {
  const char* name;     // "tcp": also prefixes messages and names the logs
  const char* version;  // "0.1.0"
  uint32_t minor_min;   // the ABI minors the plugin implements
  uint32_t minor_max;
  uint64_t features;  // FERRY_FEATURE_*
};

// Logs (and, with `err`, reports) an exception that reached entry `entry`.
void ReportInternal(const char* entry, ferry_error_buf_t* err, const char* what);

// The one exception guard. `body(Status* error)` returns a code and fills
// *error only when it fails; that error goes into `err` (which may be NULL).
// Any exception becomes FERRY_INTERNAL, reported through ReportInternal.
template <typename Body>
inline ferry_status_t Guard(const char* entry, ferry_error_buf_t* err,
                            Body&& body) noexcept {
  try {
    Status error;
    const ferry_status_t code = body(&error);
    if (code != FERRY_OK) ferry_error_printf(err, "%s", error.message.c_str());
    return code;
  } catch (const std::exception& e) {
    ReportInternal(entry, err, e.what());
  } catch (...) {
    ReportInternal(entry, err, "unknown exception");
  }
  return FERRY_INTERNAL;
}

namespace entry_detail {

// Calls a plugin function of either form (see the top of this file).
template <auto Fn, typename... Args>
inline ferry_status_t Call(Status* error, Args... args) {
  if constexpr (std::is_invocable_r_v<ferry_status_t, decltype(Fn), Args..., Status*>) {
    return Fn(args..., error);
  } else {
    return Report(error, Fn(args...));
  }
}

// A slot that returns nothing: the guard logs what it catches.
template <auto Fn, typename... Args>
inline void CallVoid(const char* entry, Args... args) noexcept {
  (void)Guard(entry, nullptr, [&](Status*) {
    Fn(args...);
    return FERRY_OK;
  });
}

// One guarded function per vtable slot, each calling plugin P's function
// for that slot. The names are the ones messages and logs quote.
template <typename P>
struct Slots {
  static ferry_status_t Init(const ferry_init_args_t* args, ferry_context_t** out,
                             ferry_error_buf_t* err) noexcept {
    return Guard("init", err, [&](Status* e) { return Call<P::init>(e, args, out); });
  }
  static void Fini(ferry_context_t* ctx) noexcept { CallVoid<P::fini>("fini", ctx); }
  static ferry_status_t Query(ferry_context_t* ctx, ferry_context_info_t* info) noexcept {
    return Guard("query", nullptr,
                 [&](Status* e) { return Call<P::query>(e, ctx, info); });
  }
  static ferry_status_t Progress(ferry_context_t* ctx,
                                 ferry_progress_args_t* args) noexcept {
    return Guard("progress", nullptr,
                 [&](Status* e) { return Call<P::progress>(e, ctx, args); });
  }
  static ferry_status_t Listen(ferry_context_t* ctx, const ferry_listen_args_t* args,
                               ferry_listener_t** out, ferry_error_buf_t* err) noexcept {
    return Guard("listen", err,
                 [&](Status* e) { return Call<P::listen>(e, ctx, args, out); });
  }
  static ferry_status_t ListenerAddress(ferry_listener_t* listener, char* buf,
                                        uint64_t buf_len) noexcept {
    return Guard("listener_address", nullptr, [&](Status* e) {
      return Call<P::listener_address>(e, listener, buf, buf_len);
    });
  }
  static void CloseListener(ferry_listener_t* listener) noexcept {
    CallVoid<P::close_listener>("close_listener", listener);
  }
  static ferry_status_t Connect(ferry_context_t* ctx, const ferry_connect_args_t* args,
                                ferry_conn_t** out, ferry_error_buf_t* err) noexcept {
    return Guard("connect", err,
                 [&](Status* e) { return Call<P::connect>(e, ctx, args, out); });
  }
  static void SetConnUserData(ferry_conn_t* conn, void* user_data) noexcept {
    CallVoid<P::set_conn_user_data>("set_conn_user_data", conn, user_data);
  }
  static ferry_status_t Send(ferry_conn_t* conn, const ferry_send_args_t* args,
                             ferry_error_buf_t* err) noexcept {
    return Guard("send", err, [&](Status* e) { return Call<P::send>(e, conn, args); });
  }
  static ferry_status_t Place(ferry_conn_t* conn, const ferry_place_args_t* args,
                              ferry_error_buf_t* err) noexcept {
    return Guard("place", err, [&](Status* e) { return Call<P::place>(e, conn, args); });
  }
  static ferry_status_t Discard(ferry_conn_t* conn, uint64_t msg_id,
                                ferry_error_buf_t* err) noexcept {
    return Guard("discard", err,
                 [&](Status* e) { return Call<P::discard>(e, conn, msg_id); });
  }
  static void Close(ferry_conn_t* conn) noexcept { CallVoid<P::close>("close", conn); }
  static ferry_status_t Reg(ferry_context_t* ctx, const ferry_reg_args_t* args,
                            ferry_mr_t** out, ferry_error_buf_t* err) noexcept {
    return Guard("reg", err, [&](Status* e) { return Call<P::reg>(e, ctx, args, out); });
  }
  static void Dereg(ferry_context_t* ctx, ferry_mr_t* mr) noexcept {
    CallVoid<P::dereg>("dereg", ctx, mr);
  }
  static ferry_status_t ConnPeerAddress(ferry_conn_t* conn, char* buf,
                                        uint64_t buf_len) noexcept {
    return Guard("conn_peer_address", nullptr, [&](Status* e) {
      return Call<P::conn_peer_address>(e, conn, buf, buf_len);
    });
  }
  static ferry_status_t MemAlloc(ferry_context_t* ctx, ferry_device_t device,
                                 uint64_t length, void** out,
                                 ferry_error_buf_t* err) noexcept {
    return Guard("mem_alloc", err, [&](Status* e) {
      return Call<P::mem_alloc>(e, ctx, device, length, out);
    });
  }
  static void MemFree(ferry_context_t* ctx, ferry_device_t device, void* data) noexcept {
    CallVoid<P::mem_free>("mem_free", ctx, device, data);
  }
  static ferry_status_t MemCopy(ferry_context_t* ctx, void* dst,
                                ferry_device_t dst_device, const void* src,
                                ferry_device_t src_device, uint64_t length,
                                uint64_t src_stream, ferry_error_buf_t* err) noexcept {
    return Guard("mem_copy", err, [&](Status* e) {
      return Call<P::mem_copy>(e, ctx, dst, dst_device, src, src_device, length,
                               src_stream);
    });
  }
};

// Whether plugin P names the device memory services (all three, or none).
template <typename P, typename = void>
struct HasMemoryServices : std::false_type {};
template <typename P>
struct HasMemoryServices<
    P, std::void_t<decltype(P::mem_alloc), decltype(P::mem_free), decltype(P::mem_copy)>>
    : std::true_type {};

template <typename P>
constexpr ferry_transport_vtable_t MakeVtable() {
  using S = Slots<P>;
  ferry_transport_vtable_t v{};
  v.struct_size = sizeof v;
  v.init = S::Init;
  v.fini = S::Fini;
  v.query = S::Query;
  v.progress = S::Progress;
  v.listen = S::Listen;
  v.listener_address = S::ListenerAddress;
  v.close_listener = S::CloseListener;
  v.connect = S::Connect;
  v.set_conn_user_data = S::SetConnUserData;
  v.send = S::Send;
  v.place = S::Place;
  v.discard = S::Discard;
  v.close = S::Close;
  // reg and dereg are optional: a plugin leaves them NULL with `= nullptr`.
  if constexpr (!std::is_null_pointer_v<decltype(P::reg)>) v.reg = S::Reg;
  if constexpr (!std::is_null_pointer_v<decltype(P::dereg)>) v.dereg = S::Dereg;
  v.conn_peer_address = S::ConnPeerAddress;
  if constexpr (HasMemoryServices<P>::value) {
    v.mem_alloc = S::MemAlloc;
    v.mem_free = S::MemFree;
    v.mem_copy = S::MemCopy;
  }
  return v;
}

// Static storage: the host keeps the vtable pointer for as long as the
// plugin stays loaded.
template <typename P>
inline constexpr ferry_transport_vtable_t kVtable = MakeVtable<P>();

}  // namespace entry_detail

// The body of ferry_transport_negotiate for plugin P: the ABI's negotiation
// (ferry_plugin_negotiate) with P's answer, and on success the name and host
// services the rest of the plugin logs and reads parameters with.
template <typename P>
ferry_status_t Negotiate(ferry_negotiate_args_t* args) noexcept {
  // No error buffer: on failure ferry_plugin_negotiate wrote args->err itself.
  return Guard("negotiate", nullptr, [&](Status*) {
    const PluginInfo& info = P::kInfo;
    const ferry_status_t code =
        ferry_plugin_negotiate(args, info.name, info.version, info.minor_min,
                               info.minor_max, info.features, &entry_detail::kVtable<P>);
    if (code == FERRY_OK) {
      SetPluginName(info.name);
      SetHostServices(args->host);
    }
    return code;
  });
}

// "<plugin>: send() got an invalid connection handle"
Status BadHandle(const char* entry, const char* what);
// "<plugin>: send() needs a ferry_send_args_t with struct_size >= N (got M)"
Status BadArgs(const char* entry, const char* type, uint32_t got, size_t need);
// The argument structs whose size every plugin checks the same way: their
// name (for messages) and the struct_size the ABI's first minor defines.
template <typename Args>
struct ArgsSpec;
#define FERRY_PLUGIN_ARGS_SPEC(type, min_size)     \
  template <>                                      \
  struct ArgsSpec<type> {                          \
    static constexpr const char* kName = #type;    \
    static constexpr size_t kMinSize = (min_size); \
  };
FERRY_PLUGIN_ARGS_SPEC(ferry_listen_args_t, FERRY_LISTEN_ARGS_STRUCT_SIZE)
FERRY_PLUGIN_ARGS_SPEC(ferry_connect_args_t, FERRY_CONNECT_ARGS_STRUCT_SIZE)
FERRY_PLUGIN_ARGS_SPEC(ferry_send_args_t, FERRY_SEND_ARGS_STRUCT_SIZE)
FERRY_PLUGIN_ARGS_SPEC(ferry_place_args_t, FERRY_PLACE_ARGS_STRUCT_SIZE)
FERRY_PLUGIN_ARGS_SPEC(ferry_reg_args_t, FERRY_REG_ARGS_STRUCT_SIZE)
#undef FERRY_PLUGIN_ARGS_SPEC

// True when `args` is there and has at least the fields of ArgsSpec.
template <typename Args>
bool ArgsOk(const Args* args) {
  return args != nullptr && args->struct_size >= ArgsSpec<Args>::kMinSize;
}
// BadArgs for `args` that are not ArgsOk.
template <typename Args>
Status BadArgs(const char* entry, const Args* args) {
  return BadArgs(entry, ArgsSpec<Args>::kName, args != nullptr ? args->struct_size : 0,
                 ArgsSpec<Args>::kMinSize);
}

// Copies `s` with its NUL into buf (listener_address, conn_peer_address);
// RESOURCE_EXHAUSTED (and an empty string, when there is room for one) if
// buf_len is too small.
Status CopyString(const std::string& s, char* buf, uint64_t buf_len);

}  // namespace ferry_plugin

// Defines the plugin's one exported symbol, ferry_transport_negotiate, for
// the plugin described by P (see the top of this file). Use once per plugin,
// at global scope.
#define FERRY_PLUGIN_ENTRY(P)                                                 \
  extern "C" FERRY_TRANSPORT_EXPORT ferry_status_t ferry_transport_negotiate( \
      ferry_negotiate_args_t* args) {                                         \
    return ::ferry_plugin::Negotiate<P>(args);                                \
  }
