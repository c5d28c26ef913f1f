// What each host call does before the context takes over: check the handle
// (connections and listeners carry a magic, so a handle of the wrong kind is
// caught) and the arguments, take the context lock, and afterwards let the
// context deliver what the call released (AfterHostCall).
#include "host_calls.h"

#include "context.h"

#include "ferry_plugin/entry.h"
#include "ferry_plugin/log.h"

#include <memory>
#include <mutex>

namespace ferry_chaos::host_calls {
namespace {

using ferry_plugin::ArgsOk;
using ferry_plugin::BadArgs;
using ferry_plugin::BadHandle;

Context* CtxOf(ferry_context_t* h) {
  return reinterpret_cast<Context*>(h);
}
Conn* ConnOf(ferry_conn_t* h) {
  auto* c = reinterpret_cast<Conn*>(h);
  return c != nullptr && c->magic == kConnMagic ? c : nullptr;
}
Listener* ListenerOf(ferry_listener_t* h) {
  auto* l = reinterpret_cast<Listener*>(h);
  return l != nullptr && l->magic == kListenerMagic ? l : nullptr;
}

}  // namespace

Status Init(const ferry_init_args_t* args, ferry_context_t** out) {
  if (out == nullptr) {
    return Error(FERRY_INVALID_ARGUMENT, "chaos: init() needs an out pointer");
  }
  std::unique_ptr<Context> ctx;
  Status st = Context::Create(args, &ctx);
  if (st.ok()) *out = reinterpret_cast<ferry_context_t*>(ctx.release());
  return st;
}

void Fini(ferry_context_t* handle) {
  delete CtxOf(handle);
}

Status Query(ferry_context_t* handle, ferry_context_info_t* info) {
  Context* ctx = CtxOf(handle);
  if (ctx == nullptr || info == nullptr || info->struct_size < sizeof(uint32_t)) {
    return Error(FERRY_INVALID_ARGUMENT, "chaos: query() needs a context and info");
  }
  std::lock_guard<std::mutex> lock(ctx->mutex());
  ctx->Query(info);
  return Status();
}

Status Progress(ferry_context_t* handle, ferry_progress_args_t* args) {
  Context* ctx = CtxOf(handle);
  if (ctx == nullptr || args == nullptr ||
      args->struct_size < FERRY_STRUCT_SIZE(ferry_progress_args_t, num_events)) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "chaos: progress() needs a context and progress args");
  }
  std::lock_guard<std::mutex> lock(ctx->mutex());
  Status st = ctx->Progress(args);
  if (!st.ok()) FERRY_PLUGIN_LOG(FERRY_LOG_ERROR, "%s", st.message.c_str());
  return st;
}

Status Listen(ferry_context_t* handle, const ferry_listen_args_t* args,
              ferry_listener_t** out) {
  Context* ctx = CtxOf(handle);
  if (ctx == nullptr || out == nullptr) return BadHandle("listen", "context");
  if (!ArgsOk(args)) return BadArgs("listen", args);
  std::lock_guard<std::mutex> lock(ctx->mutex());
  Listener* l = nullptr;
  Status st = ctx->Listen(*args, &l);
  if (st.ok()) *out = reinterpret_cast<ferry_listener_t*>(l);
  return st;
}

Status ListenerAddress(ferry_listener_t* handle, char* buf, uint64_t buf_len) {
  Listener* l = ListenerOf(handle);
  if (l == nullptr) return BadHandle("listener_address", "listener");
  std::lock_guard<std::mutex> lock(l->ctx->mutex());
  return l->ctx->ListenerAddress(l, buf, buf_len);
}

void CloseListener(ferry_listener_t* handle) {
  Listener* l = ListenerOf(handle);
  if (l == nullptr) {
    FERRY_PLUGIN_LOG(FERRY_LOG_ERROR, "close_listener() got an invalid handle");
    return;
  }
  Context* ctx = l->ctx;
  std::lock_guard<std::mutex> lock(ctx->mutex());
  ctx->CloseListener(l);
}

Status Connect(ferry_context_t* handle, const ferry_connect_args_t* args,
               ferry_conn_t** out) {
  Context* ctx = CtxOf(handle);
  if (ctx == nullptr || out == nullptr) return BadHandle("connect", "context");
  if (!ArgsOk(args)) return BadArgs("connect", args);
  std::lock_guard<std::mutex> lock(ctx->mutex());
  Conn* c = nullptr;
  Status st = ctx->Connect(*args, &c);
  if (st.ok()) *out = reinterpret_cast<ferry_conn_t*>(c);
  ctx->AfterHostCall();
  return st;
}

void SetConnUserData(ferry_conn_t* handle, void* user_data) {
  Conn* c = ConnOf(handle);
  if (c == nullptr) return;
  std::lock_guard<std::mutex> lock(c->ctx->mutex());
  c->ctx->SetConnUserData(c, user_data);
}

Status Send(ferry_conn_t* handle, const ferry_send_args_t* args) {
  Conn* c = ConnOf(handle);
  if (c == nullptr) return BadHandle("send", "connection");
  if (!ArgsOk(args)) return BadArgs("send", args);
  Context* ctx = c->ctx;
  std::lock_guard<std::mutex> lock(ctx->mutex());
  Status st = ctx->Send(c, args);
  ctx->AfterHostCall();
  return st;
}

Status Place(ferry_conn_t* handle, const ferry_place_args_t* args) {
  Conn* c = ConnOf(handle);
  if (c == nullptr) return BadHandle("place", "connection");
  if (!ArgsOk(args)) return BadArgs("place", args);
  Context* ctx = c->ctx;
  std::lock_guard<std::mutex> lock(ctx->mutex());
  Status st = ctx->Place(c, *args);
  ctx->AfterHostCall();
  return st;
}

Status Discard(ferry_conn_t* handle, uint64_t msg_id) {
  Conn* c = ConnOf(handle);
  if (c == nullptr) return BadHandle("discard", "connection");
  Context* ctx = c->ctx;
  std::lock_guard<std::mutex> lock(ctx->mutex());
  Status st = ctx->Discard(c, msg_id);
  ctx->AfterHostCall();
  return st;
}

void Close(ferry_conn_t* handle) {
  Conn* c = ConnOf(handle);
  if (c == nullptr) {
    FERRY_PLUGIN_LOG(FERRY_LOG_ERROR, "close() got an invalid connection handle");
    return;
  }
  Context* ctx = c->ctx;
  std::lock_guard<std::mutex> lock(ctx->mutex());
  ctx->Close(c);
  ctx->AfterHostCall();
}

Status Reg(ferry_context_t* handle, const ferry_reg_args_t* args, ferry_mr_t** out) {
  Context* ctx = CtxOf(handle);
  if (ctx == nullptr || out == nullptr) return BadHandle("reg", "context");
  if (!ArgsOk(args)) return BadArgs("reg", args);
  std::lock_guard<std::mutex> lock(ctx->mutex());
  return ctx->Reg(args, out);
}

void Dereg(ferry_context_t* handle, ferry_mr_t* mr) {
  Context* ctx = CtxOf(handle);
  if (ctx == nullptr) return;
  std::lock_guard<std::mutex> lock(ctx->mutex());
  ctx->Dereg(mr);
}

Status ConnPeerAddress(ferry_conn_t* handle, char* buf, uint64_t buf_len) {
  Conn* c = ConnOf(handle);
  if (c == nullptr) return BadHandle("conn_peer_address", "connection");
  std::lock_guard<std::mutex> lock(c->ctx->mutex());
  return c->ctx->PeerAddress(c, buf, buf_len);
}

}  // namespace ferry_chaos::host_calls
