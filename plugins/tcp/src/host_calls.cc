// What each host call does before the context takes over: check the handle
// and the arguments, take the context lock, and afterwards let the context
// flush what the call queued (AfterHostCall).
#include "host_calls.h"

#include "connection.h"
#include "context.h"
#include "handles.h"
#include "listener.h"

#include "ferry_plugin/entry.h"
#include "ferry_plugin/init_args.h"
#include "ferry_plugin/log.h"

#include <memory>
#include <mutex>

namespace ferry_tcp::host_calls {

using ferry_plugin::ArgsOk;
using ferry_plugin::BadArgs;
using ferry_plugin::BadHandle;
using ferry_plugin::CopyString;

Status Init(const ferry_init_args_t* args, ferry_context_t** out) {
  if (out == nullptr) {
    return Error(FERRY_INVALID_ARGUMENT, "tcp: init() needs an out pointer");
  }
  const ferry_plugin::InitArgs in = ferry_plugin::ReadInitArgs(args);
  std::unique_ptr<Context> ctx;
  Status st = Context::Create(in.flags, in.instance, &ctx);
  if (st.ok()) *out = ToHandle(ctx.release());
  return st;
}

void Fini(ferry_context_t* handle) {
  delete FromHandle(handle);
}

Status Query(ferry_context_t* handle, ferry_context_info_t* info) {
  Context* ctx = FromHandle(handle);
  if (ctx == nullptr || info == nullptr || info->struct_size < sizeof(uint32_t)) {
    return Error(FERRY_INVALID_ARGUMENT, "tcp: query() needs a context and info");
  }
  std::lock_guard<ContextMutex> lock(ctx->mutex());
  ctx->Query(info);
  return Status();
}

ferry_status_t Progress(ferry_context_t* handle, ferry_progress_args_t* args,
                        Status* error) {
  Context* ctx = FromHandle(handle);
  if (ctx == nullptr || args == nullptr ||
      args->struct_size < FERRY_STRUCT_SIZE(ferry_progress_args_t, num_events)) {
    return Report(error, Error(FERRY_INVALID_ARGUMENT,
                               "tcp: progress() needs a context and progress args"));
  }
  std::lock_guard<ContextMutex> lock(ctx->mutex());
  ferry_status_t code = ctx->Progress(args, error);
  if (code != FERRY_OK) {
    FERRY_PLUGIN_LOG(FERRY_LOG_ERROR, "%s", error->message.c_str());
  }
  return code;
}

Status Listen(ferry_context_t* handle, const ferry_listen_args_t* args,
              ferry_listener_t** out) {
  Context* ctx = FromHandle(handle);
  if (ctx == nullptr || out == nullptr) return BadHandle("listen", "context");
  if (!ArgsOk(args)) return BadArgs("listen", args);
  std::lock_guard<ContextMutex> lock(ctx->mutex());
  Listener* listener = nullptr;
  Status st = ctx->Listen(args->address, args->user_data, &listener);
  if (st.ok()) *out = ToHandle(listener);
  return st;
}

Status ListenerAddress(ferry_listener_t* handle, char* buf, uint64_t buf_len) {
  Listener* l = FromHandle(handle);
  if (l == nullptr) return BadHandle("listener_address", "listener");
  return CopyString(l->address(), buf, buf_len);  // immutable: no lock
}

void CloseListener(ferry_listener_t* handle) {
  Listener* l = FromHandle(handle);
  if (l == nullptr) {
    FERRY_PLUGIN_LOG(FERRY_LOG_ERROR, "close_listener() got an invalid handle");
    return;
  }
  Context* ctx = l->context();
  std::lock_guard<ContextMutex> lock(ctx->mutex());
  ctx->CloseListener(l);
}

Status Connect(ferry_context_t* handle, const ferry_connect_args_t* args,
               ferry_conn_t** out) {
  Context* ctx = FromHandle(handle);
  if (ctx == nullptr || out == nullptr) return BadHandle("connect", "context");
  if (!ArgsOk(args)) return BadArgs("connect", args);
  std::lock_guard<ContextMutex> lock(ctx->mutex());
  Conn* conn = nullptr;
  Status st = ctx->Connect(args->address, args->user_data, &conn);
  if (st.ok()) *out = ToHandle(conn);
  ctx->AfterHostCall();
  return st;
}

void SetConnUserData(ferry_conn_t* handle, void* user_data) {
  Conn* conn = FromHandle(handle);
  if (conn == nullptr) return;
  std::lock_guard<ContextMutex> lock(conn->context()->mutex());
  conn->set_user_data(user_data);
}

ferry_status_t Send(ferry_conn_t* handle, const ferry_send_args_t* args, Status* error) {
  Conn* conn = FromHandle(handle);
  if (conn == nullptr) return Report(error, BadHandle("send", "connection"));
  if (!ArgsOk(args)) return Report(error, BadArgs("send", args));
  Context* ctx = conn->context();
  std::lock_guard<ContextMutex> lock(ctx->mutex());
  ferry_status_t code = conn->Send(*args, error);
  ctx->AfterHostCall();
  return code;
}

ferry_status_t Place(ferry_conn_t* handle, const ferry_place_args_t* args,
                     Status* error) {
  Conn* conn = FromHandle(handle);
  if (conn == nullptr) return Report(error, BadHandle("place", "connection"));
  if (!ArgsOk(args)) return Report(error, BadArgs("place", args));
  Context* ctx = conn->context();
  std::lock_guard<ContextMutex> lock(ctx->mutex());
  ferry_status_t code = conn->Place(*args, error);
  ctx->AfterHostCall();
  return code;
}

ferry_status_t Discard(ferry_conn_t* handle, uint64_t msg_id, Status* error) {
  Conn* conn = FromHandle(handle);
  if (conn == nullptr) {
    return Report(error, BadHandle("discard", "connection"));
  }
  Context* ctx = conn->context();
  std::lock_guard<ContextMutex> lock(ctx->mutex());
  ferry_status_t code = conn->Discard(msg_id, error);
  ctx->AfterHostCall();
  return code;
}

void Close(ferry_conn_t* handle) {
  Conn* conn = FromHandle(handle);
  if (conn == nullptr) {
    FERRY_PLUGIN_LOG(FERRY_LOG_ERROR, "close() got an invalid connection handle");
    return;
  }
  Context* ctx = conn->context();
  std::lock_guard<ContextMutex> lock(ctx->mutex());
  conn->Close();
  ctx->AfterHostCall();
}

Status ConnPeerAddress(ferry_conn_t* handle, char* buf, uint64_t buf_len) {
  Conn* conn = FromHandle(handle);
  if (conn == nullptr) return BadHandle("conn_peer_address", "connection");
  return CopyString(conn->peer(), buf, buf_len);  // immutable: no lock
}

}  // namespace ferry_tcp::host_calls
