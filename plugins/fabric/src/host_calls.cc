// What each host call does before the context takes over: check the handle
// (connections, listeners and registrations carry a magic, so a handle of
// the wrong kind is caught) and the arguments, take the context lock, and
// afterwards let the context post what the call queued (AfterHostCall).
#include "host_calls.h"

#include "context.h"

#include "ferry_plugin/entry.h"
#include "ferry_plugin/init_args.h"
#include "ferry_plugin/log.h"

#include <memory>
#include <mutex>

namespace ferry_fabric::host_calls {
namespace {

using ferry_plugin::ArgsOk;
using ferry_plugin::BadArgs;
using ferry_plugin::BadHandle;
using ferry_plugin::CopyString;

Context* ToContext(ferry_context_t* h) {
  return reinterpret_cast<Context*>(h);
}

Conn* ToConn(ferry_conn_t* h) {
  auto* c = reinterpret_cast<Conn*>(h);
  return c != nullptr && c->magic == Conn::kMagic ? c : nullptr;
}

Listener* ToListener(ferry_listener_t* h) {
  auto* l = reinterpret_cast<Listener*>(h);
  return l != nullptr && l->magic == Listener::kMagic ? l : nullptr;
}

}  // namespace

Status Init(const ferry_init_args_t* args, ferry_context_t** out) {
  if (out == nullptr) {
    return Error(FERRY_INVALID_ARGUMENT, "fabric: init() needs an out pointer");
  }
  const ferry_plugin::InitArgs in = ferry_plugin::ReadInitArgs(args);
  std::unique_ptr<Context> ctx;
  Status st = Context::Create(in.flags, in.instance, &ctx);
  if (st.ok()) *out = reinterpret_cast<ferry_context_t*>(ctx.release());
  return st;
}

void Fini(ferry_context_t* handle) {
  delete ToContext(handle);
}

Status Query(ferry_context_t* handle, ferry_context_info_t* info) {
  Context* ctx = ToContext(handle);
  if (ctx == nullptr || info == nullptr || info->struct_size < sizeof(uint32_t)) {
    return Error(FERRY_INVALID_ARGUMENT, "fabric: query() needs a context and info");
  }
  std::lock_guard<ferry_plugin::Mutex> lock(ctx->mutex());
  ctx->Query(info);
  return Status();
}

ferry_status_t Progress(ferry_context_t* handle, ferry_progress_args_t* args,
                        Status* error) {
  Context* ctx = ToContext(handle);
  if (ctx == nullptr || args == nullptr ||
      args->struct_size < FERRY_STRUCT_SIZE(ferry_progress_args_t, num_events)) {
    return Report(error, Error(FERRY_INVALID_ARGUMENT,
                               "fabric: progress() needs a context and progress args"));
  }
  std::lock_guard<ferry_plugin::Mutex> lock(ctx->mutex());
  const ferry_status_t code = ctx->Progress(args, error);
  if (code != FERRY_OK) FERRY_PLUGIN_LOG(FERRY_LOG_ERROR, "%s", error->message.c_str());
  return code;
}

Status Listen(ferry_context_t* handle, const ferry_listen_args_t* args,
              ferry_listener_t** out) {
  Context* ctx = ToContext(handle);
  if (ctx == nullptr || out == nullptr) return BadHandle("listen", "context");
  if (!ArgsOk(args)) return BadArgs("listen", args);
  std::lock_guard<ferry_plugin::Mutex> lock(ctx->mutex());
  Listener* l = nullptr;
  Status st = ctx->Listen(args->address, args->user_data, &l);
  if (st.ok()) *out = reinterpret_cast<ferry_listener_t*>(l);
  return st;
}

Status ListenerAddress(ferry_listener_t* handle, char* buf, uint64_t buf_len) {
  Listener* l = ToListener(handle);
  if (l == nullptr) return BadHandle("listener_address", "listener");
  return CopyString(l->address, buf, buf_len);  // immutable: no lock
}

void CloseListener(ferry_listener_t* handle) {
  Listener* l = ToListener(handle);
  if (l == nullptr) {
    FERRY_PLUGIN_LOG(FERRY_LOG_ERROR, "close_listener() got an invalid handle");
    return;
  }
  Context* ctx = l->ctx;
  std::lock_guard<ferry_plugin::Mutex> lock(ctx->mutex());
  ctx->CloseListener(l);
}

Status Connect(ferry_context_t* handle, const ferry_connect_args_t* args,
               ferry_conn_t** out) {
  Context* ctx = ToContext(handle);
  if (ctx == nullptr || out == nullptr) return BadHandle("connect", "context");
  if (!ArgsOk(args)) return BadArgs("connect", args);
  std::lock_guard<ferry_plugin::Mutex> lock(ctx->mutex());
  Conn* conn = nullptr;
  Status st = ctx->Connect(args->address, args->user_data, &conn);
  if (st.ok()) *out = reinterpret_cast<ferry_conn_t*>(conn);
  ctx->AfterHostCall();
  return st;
}

void SetConnUserData(ferry_conn_t* handle, void* user_data) {
  Conn* conn = ToConn(handle);
  if (conn == nullptr) return;
  std::lock_guard<ferry_plugin::Mutex> lock(conn->ctx->mutex());
  conn->user_data = user_data;
}

ferry_status_t Send(ferry_conn_t* handle, const ferry_send_args_t* args, Status* error) {
  Conn* conn = ToConn(handle);
  if (conn == nullptr) return Report(error, BadHandle("send", "connection"));
  if (!ArgsOk(args)) return Report(error, BadArgs("send", args));
  Context* ctx = conn->ctx;
  std::lock_guard<ferry_plugin::Mutex> lock(ctx->mutex());
  const ferry_status_t code = ctx->Send(conn, *args, error);
  ctx->AfterHostCall();
  return code;
}

ferry_status_t Place(ferry_conn_t* handle, const ferry_place_args_t* args,
                     Status* error) {
  Conn* conn = ToConn(handle);
  if (conn == nullptr) return Report(error, BadHandle("place", "connection"));
  if (!ArgsOk(args)) return Report(error, BadArgs("place", args));
  Context* ctx = conn->ctx;
  std::lock_guard<ferry_plugin::Mutex> lock(ctx->mutex());
  Status st = ctx->Place(conn, *args);
  ctx->AfterHostCall();
  return Report(error, std::move(st));
}

ferry_status_t Discard(ferry_conn_t* handle, uint64_t msg_id, Status* error) {
  Conn* conn = ToConn(handle);
  if (conn == nullptr) return Report(error, BadHandle("discard", "connection"));
  Context* ctx = conn->ctx;
  std::lock_guard<ferry_plugin::Mutex> lock(ctx->mutex());
  const ferry_status_t code = ctx->Discard(conn, msg_id, error);
  ctx->AfterHostCall();
  return code;
}

void Close(ferry_conn_t* handle) {
  Conn* conn = ToConn(handle);
  if (conn == nullptr) {
    FERRY_PLUGIN_LOG(FERRY_LOG_ERROR, "close() got an invalid connection handle");
    return;
  }
  Context* ctx = conn->ctx;
  std::lock_guard<ferry_plugin::Mutex> lock(ctx->mutex());
  ctx->Close(conn);
  ctx->AfterHostCall();
}

Status Reg(ferry_context_t* handle, const ferry_reg_args_t* args, ferry_mr_t** out) {
  Context* ctx = ToContext(handle);
  if (ctx == nullptr || out == nullptr) return BadHandle("reg", "context");
  if (args == nullptr ||
      args->struct_size < FERRY_STRUCT_SIZE(ferry_reg_args_t, length)) {
    return BadArgs("reg", "ferry_reg_args_t", args ? args->struct_size : 0,
                   FERRY_STRUCT_SIZE(ferry_reg_args_t, length));
  }
  std::lock_guard<ferry_plugin::Mutex> lock(ctx->mutex());
  HostMr* mr = nullptr;
  Status st = ctx->Reg(*args, &mr);
  if (st.ok()) *out = reinterpret_cast<ferry_mr_t*>(mr);
  return st;
}

void Dereg(ferry_context_t* handle, ferry_mr_t* mr) {
  Context* ctx = ToContext(handle);
  auto* h = reinterpret_cast<HostMr*>(mr);
  if (ctx == nullptr || h == nullptr || h->magic != HostMr::kMagic) {
    FERRY_PLUGIN_LOG(FERRY_LOG_ERROR, "dereg() got an invalid handle");
    return;
  }
  std::lock_guard<ferry_plugin::Mutex> lock(ctx->mutex());
  ctx->Dereg(h);
}

Status ConnPeerAddress(ferry_conn_t* handle, char* buf, uint64_t buf_len) {
  Conn* conn = ToConn(handle);
  if (conn == nullptr) return BadHandle("conn_peer_address", "connection");
  return CopyString(conn->peer_address, buf, buf_len);  // immutable
}

}  // namespace ferry_fabric::host_calls
