// What each host call does before the context takes over: check the handle
// and the arguments, and afterwards let the context update its wakeup fd.
#include "host_calls.h"

#include "connection.h"
#include "context.h"

#include "ferry_plugin/entry.h"
#include "ferry_plugin/init_args.h"
#include "ferry_plugin/log.h"

#include <cstring>
#include <memory>

namespace ferry_cuda_ipc::host_calls {

using ferry_plugin::ArgsOk;
using ferry_plugin::BadArgs;
using ferry_plugin::BadHandle;
using ferry_plugin::CopyString;

namespace {

Context* FromHandle(ferry_context_t* h) {
  return reinterpret_cast<Context*>(h);
}
Listener* FromHandle(ferry_listener_t* h) {
  return reinterpret_cast<Listener*>(h);
}
Conn* FromHandle(ferry_conn_t* h) {
  return reinterpret_cast<Conn*>(h);
}

bool IsHost(const ferry_device_t& d) {
  return d.type == 0 || d.type == FERRY_DEVICE_CPU || d.type == FERRY_DEVICE_CUDA_HOST;
}

}  // namespace

Status Init(const ferry_init_args_t* args, ferry_context_t** out) {
  if (out == nullptr) {
    return Error(FERRY_INVALID_ARGUMENT, "cuda_ipc: init() needs an out pointer");
  }
  const ferry_plugin::InitArgs in = ferry_plugin::ReadInitArgs(args);
  std::unique_ptr<Context> ctx;
  Status st = Context::Create(in.flags, in.instance, &ctx);
  if (st.ok()) *out = reinterpret_cast<ferry_context_t*>(ctx.release());
  return st;
}

void Fini(ferry_context_t* handle) {
  delete FromHandle(handle);
}

Status Query(ferry_context_t* handle, ferry_context_info_t* info) {
  Context* ctx = FromHandle(handle);
  if (ctx == nullptr || info == nullptr || info->struct_size < sizeof(uint32_t)) {
    return Error(FERRY_INVALID_ARGUMENT, "cuda_ipc: query() needs a context and info");
  }
  ctx->Query(info);
  return Status();
}

ferry_status_t Progress(ferry_context_t* handle, ferry_progress_args_t* args,
                        Status* error) {
  Context* ctx = FromHandle(handle);
  if (ctx == nullptr || args == nullptr ||
      args->struct_size < FERRY_STRUCT_SIZE(ferry_progress_args_t, num_events)) {
    return Report(error, Error(FERRY_INVALID_ARGUMENT,
                               "cuda_ipc: progress() needs a context and progress args"));
  }
  const ferry_status_t code = ctx->Progress(args, error);
  if (code != FERRY_OK) FERRY_PLUGIN_LOG(FERRY_LOG_ERROR, "%s", error->message.c_str());
  return code;
}

Status Listen(ferry_context_t* handle, const ferry_listen_args_t* args,
              ferry_listener_t** out) {
  Context* ctx = FromHandle(handle);
  if (ctx == nullptr || out == nullptr) return BadHandle("listen", "context");
  if (!ArgsOk(args)) return BadArgs("listen", args);
  Listener* l = nullptr;
  Status st = ctx->Listen(args->address, args->user_data, &l);
  if (st.ok()) *out = reinterpret_cast<ferry_listener_t*>(l);
  ctx->AfterHostCall();
  return st;
}

Status ListenerAddress(ferry_listener_t* handle, char* buf, uint64_t buf_len) {
  Listener* l = FromHandle(handle);
  if (l == nullptr) return BadHandle("listener_address", "listener");
  return CopyString(l->address(), buf, buf_len);
}

void CloseListener(ferry_listener_t* handle) {
  Listener* l = FromHandle(handle);
  if (l == nullptr) {
    FERRY_PLUGIN_LOG(FERRY_LOG_ERROR, "close_listener() got an invalid handle");
    return;
  }
  // The listener does not know its context: every context checks.
  Context* ctx = l->context();
  ctx->CloseListener(l);
  ctx->AfterHostCall();
}

Status Connect(ferry_context_t* handle, const ferry_connect_args_t* args,
               ferry_conn_t** out) {
  Context* ctx = FromHandle(handle);
  if (ctx == nullptr || out == nullptr) return BadHandle("connect", "context");
  if (!ArgsOk(args)) return BadArgs("connect", args);
  Conn* conn = nullptr;
  Status st = ctx->Connect(args->address, args->user_data, &conn);
  if (st.ok()) *out = reinterpret_cast<ferry_conn_t*>(conn);
  ctx->AfterHostCall();
  return st;
}

void SetConnUserData(ferry_conn_t* handle, void* user_data) {
  if (Conn* conn = FromHandle(handle)) conn->set_user_data(user_data);
}

ferry_status_t Send(ferry_conn_t* handle, const ferry_send_args_t* args, Status* error) {
  Conn* conn = FromHandle(handle);
  if (conn == nullptr) return Report(error, BadHandle("send", "connection"));
  if (!ArgsOk(args)) return Report(error, BadArgs("send", args));
  const ferry_status_t code = conn->Send(*args, error);
  conn->context()->AfterHostCall();
  return code;
}

ferry_status_t Place(ferry_conn_t* handle, const ferry_place_args_t* args,
                     Status* error) {
  Conn* conn = FromHandle(handle);
  if (conn == nullptr) return Report(error, BadHandle("place", "connection"));
  if (!ArgsOk(args)) return Report(error, BadArgs("place", args));
  const ferry_status_t code = conn->Place(*args, error);
  conn->context()->AfterHostCall();
  return code;
}

ferry_status_t Discard(ferry_conn_t* handle, uint64_t msg_id, Status* error) {
  Conn* conn = FromHandle(handle);
  if (conn == nullptr) return Report(error, BadHandle("discard", "connection"));
  const ferry_status_t code = conn->Discard(msg_id, error);
  conn->context()->AfterHostCall();
  return code;
}

void Close(ferry_conn_t* handle) {
  Conn* conn = FromHandle(handle);
  if (conn == nullptr) {
    FERRY_PLUGIN_LOG(FERRY_LOG_ERROR, "close() got an invalid connection handle");
    return;
  }
  conn->Close();
  conn->context()->AfterHostCall();
}

Status ConnPeerAddress(ferry_conn_t* handle, char* buf, uint64_t buf_len) {
  Conn* conn = FromHandle(handle);
  if (conn == nullptr) return BadHandle("conn_peer_address", "connection");
  return CopyString(conn->peer(), buf, buf_len);
}

Status MemAlloc(ferry_context_t* handle, ferry_device_t device, uint64_t length,
                void** out) {
  Context* ctx = FromHandle(handle);
  if (ctx == nullptr || out == nullptr) return BadHandle("mem_alloc", "context");
  if (device.type != FERRY_DEVICE_CUDA || ctx->gpu() == nullptr) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "cuda_ipc: mem_alloc() on device type %d: this context allocates CUDA "
                 "device memory%s",
                 device.type, ctx->gpu() == nullptr ? " (and it is host-only)" : "");
  }
  if (length == 0) {
    return Error(FERRY_INVALID_ARGUMENT, "cuda_ipc: mem_alloc() needs a length > 0");
  }
  return ctx->gpu()->Alloc(device.id, length, out);
}

void MemFree(ferry_context_t* handle, ferry_device_t device, void* data) {
  Context* ctx = FromHandle(handle);
  if (ctx == nullptr || data == nullptr) return;
  if (ctx->gpu() == nullptr || device.type != FERRY_DEVICE_CUDA ||
      !ctx->gpu()->Free(device.id, data)) {
    FERRY_PLUGIN_LOG(FERRY_LOG_ERROR,
                     "mem_free() of %p on device (%d, %d), which mem_alloc() did not "
                     "return: ignored",
                     data, device.type, device.id);
  }
}

Status MemCopy(ferry_context_t* handle, void* dst, ferry_device_t dst_device,
               const void* src, ferry_device_t src_device, uint64_t length,
               uint64_t src_stream) {
  Context* ctx = FromHandle(handle);
  if (ctx == nullptr) return BadHandle("mem_copy", "context");
  if (length > 0 && (dst == nullptr || src == nullptr)) {
    return Error(FERRY_INVALID_ARGUMENT, "cuda_ipc: mem_copy() of %llu bytes with NULL",
                 static_cast<unsigned long long>(length));
  }
  int dev = -1;
  for (const ferry_device_t* d : {&dst_device, &src_device}) {
    if (IsHost(*d)) continue;
    if (d->type != FERRY_DEVICE_CUDA || ctx->gpu() == nullptr ||
        !ctx->gpu()->valid(d->id)) {
      return Error(FERRY_INVALID_ARGUMENT,
                   "cuda_ipc: mem_copy() with memory on device (%d, %d), which this "
                   "context does not move",
                   d->type, d->id);
    }
    if (dev < 0) dev = d->id;
  }
  if (dev < 0) {  // host to host
    if (length > 0) std::memcpy(dst, src, length);
    return Status();
  }
  return ctx->gpu()->Copy(dst, src, length, dev, src_stream);
}

}  // namespace ferry_cuda_ipc::host_calls
