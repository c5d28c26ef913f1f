// The plugin's one exported symbol and the vtable behind it. Each entry
// point checks its handle and arguments, takes the context lock, and turns
// any C++ exception into FERRY_INTERNAL with a message: nothing escapes into
// the host.
#include "context.h"
#include "status.h"

#include "ferry_plugin/entry.h"

#include <ferry/transport.h>

#include <mutex>

namespace ferry_chaos {
namespace {

using ferry_plugin::ArgsOk;
using ferry_plugin::BadArgs;
using ferry_plugin::BadHandle;
using ferry_plugin::CopyString;
using ferry_plugin::Guarded;
using ferry_plugin::GuardedVoid;

constexpr const char* kPluginVersion = "0.1.0";
constexpr uint32_t kMinorMin = 1;  // 0.1 is the first published minor
constexpr uint32_t kMinorMax = FERRY_TRANSPORT_ABI_MINOR;

Context* CtxOf(ferry_context_t* h) { return reinterpret_cast<Context*>(h); }
Conn* ConnOf(ferry_conn_t* h) {
  auto* c = reinterpret_cast<Conn*>(h);
  return c != nullptr && c->magic == kConnMagic ? c : nullptr;
}
Listener* ListenerOf(ferry_listener_t* h) {
  auto* l = reinterpret_cast<Listener*>(h);
  return l != nullptr && l->magic == kListenerMagic ? l : nullptr;
}

// --- vtable entries --------------------------------------------------------

ferry_status_t Init(const ferry_init_args_t* args, ferry_context_t** out,
                    ferry_error_buf_t* err) {
  return Guarded("init", err, [&]() -> Status {
    if (out == nullptr) {
      return Error(FERRY_INVALID_ARGUMENT, "chaos: init() needs an out pointer");
    }
    std::unique_ptr<Context> ctx;
    Status st = Context::Create(args, &ctx);
    if (st.ok()) *out = reinterpret_cast<ferry_context_t*>(ctx.release());
    return st;
  });
}

void Fini(ferry_context_t* handle) {
  GuardedVoid("fini", [&] { delete CtxOf(handle); });
}

ferry_status_t Query(ferry_context_t* handle, ferry_context_info_t* info) {
  return Guarded("query", nullptr, [&]() -> Status {
    Context* ctx = CtxOf(handle);
    if (ctx == nullptr || info == nullptr || info->struct_size < sizeof(uint32_t)) {
      return Error(FERRY_INVALID_ARGUMENT, "chaos: query() needs a context and info");
    }
    std::lock_guard<std::mutex> lock(ctx->mutex());
    ctx->Query(info);
    return Status();
  });
}

ferry_status_t Progress(ferry_context_t* handle, ferry_progress_args_t* args) {
  return Guarded("progress", nullptr, [&]() -> Status {
    Context* ctx = CtxOf(handle);
    if (ctx == nullptr || args == nullptr ||
        args->struct_size < FERRY_STRUCT_SIZE(ferry_progress_args_t, num_events)) {
      return Error(FERRY_INVALID_ARGUMENT,
                   "chaos: progress() needs a context and progress args");
    }
    std::lock_guard<std::mutex> lock(ctx->mutex());
    Status st = ctx->Progress(args);
    if (!st.ok()) CHAOS_LOG(FERRY_LOG_ERROR, "%s", st.message.c_str());
    return st;
  });
}

ferry_status_t Listen(ferry_context_t* handle, const ferry_listen_args_t* args,
                      ferry_listener_t** out, ferry_error_buf_t* err) {
  return Guarded("listen", err, [&]() -> Status {
    Context* ctx = CtxOf(handle);
    if (ctx == nullptr || out == nullptr) return BadHandle("listen", "context");
    if (!ArgsOk(args)) return BadArgs("listen", args);
    std::lock_guard<std::mutex> lock(ctx->mutex());
    Listener* l = nullptr;
    Status st = ctx->Listen(*args, &l);
    if (st.ok()) *out = reinterpret_cast<ferry_listener_t*>(l);
    return st;
  });
}

ferry_status_t ListenerAddress(ferry_listener_t* handle, char* buf, uint64_t buf_len) {
  return Guarded("listener_address", nullptr, [&]() -> Status {
    Listener* l = ListenerOf(handle);
    if (l == nullptr) return BadHandle("listener_address", "listener");
    std::lock_guard<std::mutex> lock(l->ctx->mutex());
    return l->ctx->ListenerAddress(l, buf, buf_len);
  });
}

void CloseListener(ferry_listener_t* handle) {
  GuardedVoid("close_listener", [&] {
    Listener* l = ListenerOf(handle);
    if (l == nullptr) {
      CHAOS_LOG(FERRY_LOG_ERROR, "close_listener() got an invalid handle");
      return;
    }
    Context* ctx = l->ctx;
    std::lock_guard<std::mutex> lock(ctx->mutex());
    ctx->CloseListener(l);
  });
}

ferry_status_t Connect(ferry_context_t* handle, const ferry_connect_args_t* args,
                       ferry_conn_t** out, ferry_error_buf_t* err) {
  return Guarded("connect", err, [&]() -> Status {
    Context* ctx = CtxOf(handle);
    if (ctx == nullptr || out == nullptr) return BadHandle("connect", "context");
    if (!ArgsOk(args)) return BadArgs("connect", args);
    std::lock_guard<std::mutex> lock(ctx->mutex());
    Conn* c = nullptr;
    Status st = ctx->Connect(*args, &c);
    if (st.ok()) *out = reinterpret_cast<ferry_conn_t*>(c);
    ctx->AfterHostCall();
    return st;
  });
}

void SetConnUserData(ferry_conn_t* handle, void* user_data) {
  GuardedVoid("set_conn_user_data", [&] {
    Conn* c = ConnOf(handle);
    if (c == nullptr) return;
    std::lock_guard<std::mutex> lock(c->ctx->mutex());
    c->ctx->SetConnUserData(c, user_data);
  });
}

ferry_status_t Send(ferry_conn_t* handle, const ferry_send_args_t* args,
                    ferry_error_buf_t* err) {
  return Guarded("send", err, [&]() -> Status {
    Conn* c = ConnOf(handle);
    if (c == nullptr) return BadHandle("send", "connection");
    if (!ArgsOk(args)) return BadArgs("send", args);
    Context* ctx = c->ctx;
    std::lock_guard<std::mutex> lock(ctx->mutex());
    Status st = ctx->Send(c, args);
    ctx->AfterHostCall();
    return st;
  });
}

ferry_status_t Place(ferry_conn_t* handle, const ferry_place_args_t* args,
                     ferry_error_buf_t* err) {
  return Guarded("place", err, [&]() -> Status {
    Conn* c = ConnOf(handle);
    if (c == nullptr) return BadHandle("place", "connection");
    if (!ArgsOk(args)) return BadArgs("place", args);
    Context* ctx = c->ctx;
    std::lock_guard<std::mutex> lock(ctx->mutex());
    Status st = ctx->Place(c, *args);
    ctx->AfterHostCall();
    return st;
  });
}

ferry_status_t Discard(ferry_conn_t* handle, uint64_t msg_id, ferry_error_buf_t* err) {
  return Guarded("discard", err, [&]() -> Status {
    Conn* c = ConnOf(handle);
    if (c == nullptr) return BadHandle("discard", "connection");
    Context* ctx = c->ctx;
    std::lock_guard<std::mutex> lock(ctx->mutex());
    Status st = ctx->Discard(c, msg_id);
    ctx->AfterHostCall();
    return st;
  });
}

void Close(ferry_conn_t* handle) {
  GuardedVoid("close", [&] {
    Conn* c = ConnOf(handle);
    if (c == nullptr) {
      CHAOS_LOG(FERRY_LOG_ERROR, "close() got an invalid connection handle");
      return;
    }
    Context* ctx = c->ctx;
    std::lock_guard<std::mutex> lock(ctx->mutex());
    ctx->Close(c);
    ctx->AfterHostCall();
  });
}

ferry_status_t Reg(ferry_context_t* handle, const ferry_reg_args_t* args,
                   ferry_mr_t** out, ferry_error_buf_t* err) {
  return Guarded("reg", err, [&]() -> Status {
    Context* ctx = CtxOf(handle);
    if (ctx == nullptr || out == nullptr) return BadHandle("reg", "context");
    if (!ArgsOk(args)) return BadArgs("reg", args);
    std::lock_guard<std::mutex> lock(ctx->mutex());
    return ctx->Reg(args, out);
  });
}

void Dereg(ferry_context_t* handle, ferry_mr_t* mr) {
  GuardedVoid("dereg", [&] {
    Context* ctx = CtxOf(handle);
    if (ctx == nullptr) return;
    std::lock_guard<std::mutex> lock(ctx->mutex());
    ctx->Dereg(mr);
  });
}

ferry_status_t ConnPeerAddress(ferry_conn_t* handle, char* buf, uint64_t buf_len) {
  return Guarded("conn_peer_address", nullptr, [&]() -> Status {
    Conn* c = ConnOf(handle);
    if (c == nullptr) return BadHandle("conn_peer_address", "connection");
    std::lock_guard<std::mutex> lock(c->ctx->mutex());
    return c->ctx->PeerAddress(c, buf, buf_len);
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
  v.reg = Reg;
  v.dereg = Dereg;
  v.conn_peer_address = ConnPeerAddress;
  return v;
}

const ferry_transport_vtable_t kVtable = MakeVtable();

}  // namespace
}  // namespace ferry_chaos

extern "C" FERRY_TRANSPORT_EXPORT ferry_status_t ferry_transport_negotiate(
    ferry_negotiate_args_t* args) {
  try {
    ferry_status_t st = ferry_plugin_negotiate(
        args, ferry_chaos::kPluginName, ferry_chaos::kPluginVersion,
        ferry_chaos::kMinorMin, ferry_chaos::kMinorMax, FERRY_FEATURE_MULTI_CONTEXT,
        &ferry_chaos::kVtable);
    if (st == FERRY_OK) {
      ferry_plugin::SetPluginName(ferry_chaos::kPluginName);
      ferry_chaos::SetHostServices(args->host);
    }
    return st;
  } catch (...) {
    return FERRY_INTERNAL;
  }
}
