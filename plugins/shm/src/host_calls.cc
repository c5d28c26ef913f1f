// The plugin's one exported symbol and its vtable: thin extern "C" shims that
// turn handles into objects, keep every C++ exception on this side of the ABI
// (an internal error with a message instead), and copy statuses into the
// caller's error buffer.
#include "connection.h"
#include "context.h"
#include "listener.h"
#include "log.h"
#include "status.h"

#include <ferry/transport.h>

#include <cstring>
#include <exception>
#include <new>

namespace {

using ferry_shm::Conn;
using ferry_shm::Context;
using ferry_shm::Listener;
using ferry_shm::Status;

constexpr const char* kVersion = "0.1.0";

Context* Ctx(ferry_context_t* c) { return reinterpret_cast<Context*>(c); }
Listener* Lis(ferry_listener_t* l) { return reinterpret_cast<Listener*>(l); }

// Runs `f` (returning Status), fills `err` on failure, never throws.
template <typename F>
ferry_status_t Guard(ferry_error_buf_t* err, const char* what, F&& f) {
  try {
    Status st = f();
    if (!st.ok()) ferry_error_printf(err, "%s", st.message.c_str());
    return st.code;
  } catch (const std::bad_alloc&) {
    ferry_error_printf(err, "shm: out of memory in %s", what);
    return FERRY_RESOURCE_EXHAUSTED;
  } catch (const std::exception& e) {
    ferry_error_printf(err, "shm: internal error in %s: %s", what, e.what());
    return FERRY_INTERNAL;
  } catch (...) {
    ferry_error_printf(err, "shm: internal error in %s (unknown exception)", what);
    return FERRY_INTERNAL;
  }
}

// For void entries: swallow and log.
template <typename F>
void GuardVoid(const char* what, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    SHM_LOG(FERRY_LOG_ERROR, "shm: internal error in %s: %s", what, e.what());
  } catch (...) {
    SHM_LOG(FERRY_LOG_ERROR, "shm: internal error in %s (unknown exception)", what);
  }
}

// Marks a host call inside a connection (see Conn::EnterCall).
class InCall {
 public:
  explicit InCall(Conn* c) : c_(c) { c_->EnterCall(); }
  ~InCall() { c_->LeaveCall(); }
  InCall(const InCall&) = delete;
  InCall& operator=(const InCall&) = delete;

 private:
  Conn* c_;
};

ferry_status_t ShmInit(const ferry_init_args_t* args, ferry_context_t** out,
                       ferry_error_buf_t* err) {
  return Guard(err, "init", [&] {
    if (out == nullptr) return ferry_shm::Error(FERRY_INVALID_ARGUMENT, "shm: init() out is NULL");
    std::unique_ptr<Context> ctx;
    Status st = Context::Create(args, &ctx);
    if (st.ok()) *out = reinterpret_cast<ferry_context_t*>(ctx.release());
    return st;
  });
}

void ShmFini(ferry_context_t* ctx) {
  GuardVoid("fini", [&] { delete Ctx(ctx); });
}

ferry_status_t ShmQuery(ferry_context_t* ctx, ferry_context_info_t* info) {
  return Guard(nullptr, "query", [&] {
    if (ctx == nullptr || info == nullptr) {
      return ferry_shm::Error(FERRY_INVALID_ARGUMENT, "shm: query() needs a context and info");
    }
    Ctx(ctx)->Query(info);
    return Status();
  });
}

ferry_status_t ShmProgress(ferry_context_t* ctx, ferry_progress_args_t* args) {
  return Guard(nullptr, "progress", [&] {
    Status st = Ctx(ctx)->Progress(args);
    if (!st.ok()) SHM_LOG(FERRY_LOG_ERROR, "%s", st.message.c_str());
    return st;
  });
}

ferry_status_t ShmListen(ferry_context_t* ctx, const ferry_listen_args_t* args,
                         ferry_listener_t** out, ferry_error_buf_t* err) {
  return Guard(err, "listen", [&] {
    if (args == nullptr || out == nullptr ||
        args->struct_size < FERRY_STRUCT_SIZE(ferry_listen_args_t, address)) {
      return ferry_shm::Error(FERRY_INVALID_ARGUMENT, "shm: listen() args are missing");
    }
    void* ud = FERRY_FIELD_PRESENT(args, ferry_listen_args_t, user_data) ? args->user_data
                                                                          : nullptr;
    Listener* l = nullptr;
    Status st = Ctx(ctx)->Listen(args->address, ud, &l);
    if (st.ok()) *out = reinterpret_cast<ferry_listener_t*>(l);
    return st;
  });
}

ferry_status_t ShmListenerAddress(ferry_listener_t* listener, char* buf, uint64_t buf_len) {
  return Guard(nullptr, "listener_address", [&] {
    const std::string& path = Lis(listener)->path;
    if (buf == nullptr || path.size() + 1 > buf_len) {
      return ferry_shm::Error(FERRY_RESOURCE_EXHAUSTED,
                              "shm: the listener address needs %zu bytes", path.size() + 1);
    }
    std::memcpy(buf, path.c_str(), path.size() + 1);
    return Status();
  });
}

// The listener's context: kept beside it, since close_listener gets only
// the listener handle.
void ShmCloseListener(ferry_listener_t* listener) {
  GuardVoid("close_listener", [&] {
    Listener* l = Lis(listener);
    l->owner->CloseListener(l);
  });
}

ferry_status_t ShmConnect(ferry_context_t* ctx, const ferry_connect_args_t* args,
                          ferry_conn_t** out, ferry_error_buf_t* err) {
  return Guard(err, "connect", [&] {
    if (args == nullptr || out == nullptr ||
        args->struct_size < FERRY_STRUCT_SIZE(ferry_connect_args_t, address)) {
      return ferry_shm::Error(FERRY_INVALID_ARGUMENT, "shm: connect() args are missing");
    }
    void* ud = FERRY_FIELD_PRESENT(args, ferry_connect_args_t, user_data) ? args->user_data
                                                                           : nullptr;
    Conn* c = nullptr;
    Status st = Ctx(ctx)->Connect(args->address, ud, &c);
    if (st.ok()) *out = c->handle();
    return st;
  });
}

void ShmSetConnUserData(ferry_conn_t* conn, void* user_data) {
  Conn::From(conn)->SetUserData(user_data);
}

ferry_status_t ShmSend(ferry_conn_t* conn, const ferry_send_args_t* args,
                       ferry_error_buf_t* err) {
  Conn* c = Conn::From(conn);
  InCall in(c);
  return Guard(err, "send", [&] { return c->Send(args); });
}

ferry_status_t ShmPlace(ferry_conn_t* conn, const ferry_place_args_t* args,
                        ferry_error_buf_t* err) {
  Conn* c = Conn::From(conn);
  InCall in(c);
  return Guard(err, "place", [&] { return c->Place(args); });
}

ferry_status_t ShmDiscard(ferry_conn_t* conn, uint64_t msg_id, ferry_error_buf_t* err) {
  Conn* c = Conn::From(conn);
  InCall in(c);
  return Guard(err, "discard", [&] { return c->Discard(msg_id); });
}

void ShmClose(ferry_conn_t* conn) {
  Conn* c = Conn::From(conn);
  InCall in(c);
  GuardVoid("close", [&] { c->Close(); });
}

ferry_status_t ShmPeerAddress(ferry_conn_t* conn, char* buf, uint64_t buf_len) {
  Conn* c = Conn::From(conn);
  InCall in(c);
  return Guard(nullptr, "conn_peer_address", [&] { return c->PeerAddress(buf, buf_len); });
}

const ferry_transport_vtable_t kVtable = {
    sizeof(ferry_transport_vtable_t),
    0,
    ShmInit,
    ShmFini,
    ShmQuery,
    ShmProgress,
    ShmListen,
    ShmListenerAddress,
    ShmCloseListener,
    ShmConnect,
    ShmSetConnUserData,
    ShmSend,
    ShmPlace,
    ShmDiscard,
    ShmClose,
    nullptr,  // reg: not needed, any host memory can be sent and placed
    nullptr,  // dereg
    ShmPeerAddress,
};

}  // namespace

extern "C" FERRY_TRANSPORT_EXPORT ferry_status_t ferry_transport_negotiate(
    ferry_negotiate_args_t* args) {
  try {
    if (args != nullptr &&
        args->struct_size >= FERRY_STRUCT_SIZE(ferry_negotiate_args_t, host)) {
      ferry_shm::SetHostServices(args->host);
    }
    ferry_plugin::SetPluginName("shm");  // parameters are read under this name
    return ferry_plugin_negotiate(args, "shm", kVersion, 1, FERRY_TRANSPORT_ABI_MINOR,
                                  FERRY_FEATURE_MULTI_CONTEXT, &kVtable);
  } catch (...) {
    return FERRY_INTERNAL;
  }
}
