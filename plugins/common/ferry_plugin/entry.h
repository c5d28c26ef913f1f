// What every vtable entry of an in-tree plugin does around its real work:
// report a failing Status into the caller's error buffer, turn any C++
// exception into FERRY_INTERNAL (logged through the host), and word the
// common argument errors the same way in every plugin. Messages are
// prefixed with PluginName() (host.h).
#pragma once

#include "ferry_plugin/host.h"
#include "ferry_plugin/status.h"

#include <ferry/transport.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>

namespace ferry_plugin {

// Logs (and, with `err`, reports) an exception that reached entry `entry`.
void ReportInternal(const char* entry, ferry_error_buf_t* err, const char* what);

// For hot calls, whose `fn(Status* error)` returns a bare code and fills
// *error only when it fails (no Status built on success): reports that error
// into `err`, catches everything.
template <typename Fn>
ferry_status_t GuardedCode(const char* entry, ferry_error_buf_t* err, Fn&& fn) noexcept {
  try {
    Status error;
    const ferry_status_t code = fn(&error);
    if (code != FERRY_OK) ferry_error_printf(err, "%s", error.message.c_str());
    return code;
  } catch (const std::exception& e) {
    ReportInternal(entry, err, e.what());
  } catch (...) {
    ReportInternal(entry, err, "unknown exception");
  }
  return FERRY_INTERNAL;
}

// The same for `fn` returning a Status.
template <typename Fn>
ferry_status_t Guarded(const char* entry, ferry_error_buf_t* err, Fn&& fn) noexcept {
  return GuardedCode(entry, err, [&fn](Status* error) {
    Status st = fn();
    const ferry_status_t code = st.code;
    if (code != FERRY_OK) *error = std::move(st);
    return code;
  });
}

// For entries that return nothing (fini, close, ...).
template <typename Fn>
void GuardedVoid(const char* entry, Fn&& fn) noexcept {
  try {
    fn();
  } catch (const std::exception& e) {
    ReportInternal(entry, nullptr, e.what());
  } catch (...) {
    ReportInternal(entry, nullptr, "unknown exception");
  }
}

// "<plugin>: send() got an invalid connection handle"
Status BadHandle(const char* entry, const char* what);
// "<plugin>: send() needs a ferry_send_args_t with struct_size >= N (got M)"
Status BadArgs(const char* entry, const char* type, uint32_t got, size_t need);
// The argument structs whose size every plugin checks the same way: their
// name (for messages) and the struct_size the ABI's first minor defines.
template <typename Args>
struct ArgsSpec;
#define FERRY_PLUGIN_ARGS_SPEC(type, min_size)                     \
  template <>                                                      \
  struct ArgsSpec<type> {                                          \
    static constexpr const char* kName = #type;                    \
    static constexpr size_t kMinSize = (min_size);                 \
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
