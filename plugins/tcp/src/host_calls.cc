// The plugin's one exported symbol and the vtable behind it. Each entry
// point checks its handle and arguments, takes the context lock, and turns
// any C++ exception into FERRY_INTERNAL with a message: nothing escapes into
// the host.
#include "connection.h"
#include "context.h"
#include "handles.h"
#include "listener.h"
#include "log.h"
#include "status.h"

#include "ferry_plugin/entry.h"

#include <ferry/transport.h>

#include <mutex>

namespace ferry_tcp {
namespace {

using ferry_plugin::ArgsOk;
using ferry_plugin::BadArgs;
using ferry_plugin::BadHandle;
using ferry_plugin::CopyString;
using ferry_plugin::Guarded;
using ferry_plugin::GuardedCode;
using ferry_plugin::GuardedVoid;

constexpr const char* kPluginName = "tcp";
constexpr const char* kPluginVersion = "0.1.0";
// 0.1 is the first published minor.
constexpr uint32_t kMinorMin = 1;
constexpr uint32_t kMinorMax = FERRY_TRANSPORT_ABI_MINOR;

// --- vtable entries --------------------------------------------------------

ferry_status_t Init(const ferry_init_args_t* args, ferry_context_t** out,
                    ferry_error_buf_t* err) {
  return Guarded("init", err, [&]() -> Status {
    if (out == nullptr) {
      return Error(FERRY_INVALID_ARGUMENT, "tcp: init() needs an out pointer");
    }
    uint32_t flags = 0;
    const char* instance = nullptr;
    if (args != nullptr) {
      if (FERRY_FIELD_PRESENT(args, ferry_init_args_t, flags)) flags = args->flags;
      if (FERRY_FIELD_PRESENT(args, ferry_init_args_t, instance)) {
        instance = args->instance;
      }
    }
    std::unique_ptr<Context> ctx;
    Status st = Context::Create(flags, instance, &ctx);
    if (st.ok()) *out = ToHandle(ctx.release());
    return st;
  });
}

void Fini(ferry_context_t* handle) {
  GuardedVoid("fini", [&] { delete FromHandle(handle); });
}

ferry_status_t Query(ferry_context_t* handle, ferry_context_info_t* info) {
  return Guarded("query", nullptr, [&]() -> Status {
    Context* ctx = FromHandle(handle);
    if (ctx == nullptr || info == nullptr || info->struct_size < sizeof(uint32_t)) {
      return Error(FERRY_INVALID_ARGUMENT, "tcp: query() needs a context and info");
    }
    std::lock_guard<ContextMutex> lock(ctx->mutex());
    ctx->Query(info);
    return Status();
  });
}

ferry_status_t Progress(ferry_context_t* handle, ferry_progress_args_t* args) {
  return GuardedCode("progress", nullptr, [&](Status* error) {
    Context* ctx = FromHandle(handle);
    if (ctx == nullptr || args == nullptr ||
        args->struct_size < FERRY_STRUCT_SIZE(ferry_progress_args_t, num_events)) {
      return Report(error,
                    Error(FERRY_INVALID_ARGUMENT,
                          "tcp: progress() needs a context and progress args"));
    }
    std::lock_guard<ContextMutex> lock(ctx->mutex());
    ferry_status_t code = ctx->Progress(args, error);
    if (code != FERRY_OK) {
      TCP_LOG(FERRY_LOG_ERROR, "%s", error->message.c_str());
    }
    return code;
  });
}

ferry_status_t Listen(ferry_context_t* handle, const ferry_listen_args_t* args,
                      ferry_listener_t** out, ferry_error_buf_t* err) {
  return Guarded("listen", err, [&]() -> Status {
    Context* ctx = FromHandle(handle);
    if (ctx == nullptr || out == nullptr) return BadHandle("listen", "context");
    if (!ArgsOk(args)) return BadArgs("listen", args);
    std::lock_guard<ContextMutex> lock(ctx->mutex());
    Listener* listener = nullptr;
    Status st = ctx->Listen(args->address, args->user_data, &listener);
    if (st.ok()) *out = ToHandle(listener);
    return st;
  });
}

ferry_status_t ListenerAddress(ferry_listener_t* handle, char* buf,
                               uint64_t buf_len) {
  return Guarded("listener_address", nullptr, [&]() -> Status {
    Listener* l = FromHandle(handle);
    if (l == nullptr) return BadHandle("listener_address", "listener");
    return CopyString(l->address(), buf, buf_len);  // immutable: no lock
  });
}

void CloseListener(ferry_listener_t* handle) {
  GuardedVoid("close_listener", [&] {
    Listener* l = FromHandle(handle);
    if (l == nullptr) {
      TCP_LOG(FERRY_LOG_ERROR, "close_listener() got an invalid handle");
      return;
    }
    Context* ctx = l->context();
    std::lock_guard<ContextMutex> lock(ctx->mutex());
    ctx->CloseListener(l);
  });
}

ferry_status_t Connect(ferry_context_t* handle, const ferry_connect_args_t* args,
                       ferry_conn_t** out, ferry_error_buf_t* err) {
  return Guarded("connect", err, [&]() -> Status {
    Context* ctx = FromHandle(handle);
    if (ctx == nullptr || out == nullptr) return BadHandle("connect", "context");
    if (!ArgsOk(args)) return BadArgs("connect", args);
    std::lock_guard<ContextMutex> lock(ctx->mutex());
    Conn* conn = nullptr;
    Status st = ctx->Connect(args->address, args->user_data, &conn);
    if (st.ok()) *out = ToHandle(conn);
    ctx->AfterHostCall();
    return st;
  });
}

void SetConnUserData(ferry_conn_t* handle, void* user_data) {
  GuardedVoid("set_conn_user_data", [&] {
    Conn* conn = FromHandle(handle);
    if (conn == nullptr) return;
    std::lock_guard<ContextMutex> lock(conn->context()->mutex());
    conn->set_user_data(user_data);
  });
}

ferry_status_t Send(ferry_conn_t* handle, const ferry_send_args_t* args,
                    ferry_error_buf_t* err) {
  return GuardedCode("send", err, [&](Status* error) {
    Conn* conn = FromHandle(handle);
    if (conn == nullptr) return Report(error, BadHandle("send", "connection"));
    if (!ArgsOk(args)) return Report(error, BadArgs("send", args));
    Context* ctx = conn->context();
    std::lock_guard<ContextMutex> lock(ctx->mutex());
    ferry_status_t code = conn->Send(*args, error);
    ctx->AfterHostCall();
    return code;
  });
}

ferry_status_t Place(ferry_conn_t* handle, const ferry_place_args_t* args,
                     ferry_error_buf_t* err) {
  return GuardedCode("place", err, [&](Status* error) {
    Conn* conn = FromHandle(handle);
    if (conn == nullptr) return Report(error, BadHandle("place", "connection"));
    if (!ArgsOk(args)) return Report(error, BadArgs("place", args));
    Context* ctx = conn->context();
    std::lock_guard<ContextMutex> lock(ctx->mutex());
    ferry_status_t code = conn->Place(*args, error);
    ctx->AfterHostCall();
    return code;
  });
}

ferry_status_t Discard(ferry_conn_t* handle, uint64_t msg_id,
                       ferry_error_buf_t* err) {
  return GuardedCode("discard", err, [&](Status* error) {
    Conn* conn = FromHandle(handle);
    if (conn == nullptr) {
      return Report(error, BadHandle("discard", "connection"));
    }
    Context* ctx = conn->context();
    std::lock_guard<ContextMutex> lock(ctx->mutex());
    ferry_status_t code = conn->Discard(msg_id, error);
    ctx->AfterHostCall();
    return code;
  });
}

void Close(ferry_conn_t* handle) {
  GuardedVoid("close", [&] {
    Conn* conn = FromHandle(handle);
    if (conn == nullptr) {
      TCP_LOG(FERRY_LOG_ERROR, "close() got an invalid connection handle");
      return;
    }
    Context* ctx = conn->context();
    std::lock_guard<ContextMutex> lock(ctx->mutex());
    conn->Close();
    ctx->AfterHostCall();
  });
}

ferry_status_t ConnPeerAddress(ferry_conn_t* handle, char* buf,
                               uint64_t buf_len) {
  return Guarded("conn_peer_address", nullptr, [&]() -> Status {
    Conn* conn = FromHandle(handle);
    if (conn == nullptr) return BadHandle("conn_peer_address", "connection");
    return CopyString(conn->peer(), buf, buf_len);  // immutable: no lock
  });
}

ferry_transport_vtable_t MakeVtable() {
  ferry_transport_vtable_t v{};
  v.struct_size = sizeof v;
  v.init = Init;
  v.fini = Fini;
  v.query = Query;
  v.progress = Progress;
  v.listen = Listen;
  v.listener_address = ListenerAddress;
  v.close_listener = CloseListener;
  v.connect = Connect;
  v.set_conn_user_data = SetConnUserData;
  v.send = Send;
  v.place = Place;
  v.discard = Discard;
  v.close = Close;
  v.reg = nullptr;    // TCP needs no registration: reg/dereg are absent
  v.dereg = nullptr;
  v.conn_peer_address = ConnPeerAddress;
  return v;
}

const ferry_transport_vtable_t kVtable = MakeVtable();

}  // namespace
}  // namespace ferry_tcp

extern "C" FERRY_TRANSPORT_EXPORT ferry_status_t ferry_transport_negotiate(
    ferry_negotiate_args_t* args) {
  try {
    ferry_status_t st = ferry_plugin_negotiate(
        args, ferry_tcp::kPluginName, ferry_tcp::kPluginVersion,
        ferry_tcp::kMinorMin, ferry_tcp::kMinorMax,
        FERRY_FEATURE_MULTI_CONTEXT, &ferry_tcp::kVtable);
    if (st == FERRY_OK) {
      ferry_plugin::SetPluginName(ferry_tcp::kPluginName);
      ferry_tcp::SetHostServices(args->host);
    }
    return st;
  } catch (...) {
    return FERRY_INTERNAL;
  }
}
