// What each host call does before the context or connection takes over:
// turn handles into objects, check the arguments, and count the calls in
// flight inside a connection (InCall) so that a closed one is freed only
// once no call can still be inside it.
#include "host_calls.h"

#include "connection.h"
#include "context.h"
#include "listener.h"

#include "ferry_plugin/log.h"

#include <cstring>
#include <memory>
#include <string>

namespace ferry_shm::host_calls {
namespace {

Context* Ctx(ferry_context_t* c) {
  return reinterpret_cast<Context*>(c);
}
Listener* Lis(ferry_listener_t* l) {
  return reinterpret_cast<Listener*>(l);
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

}  // namespace

Status Init(const ferry_init_args_t* args, ferry_context_t** out) {
  if (out == nullptr) return Error(FERRY_INVALID_ARGUMENT, "shm: init() out is NULL");
  std::unique_ptr<Context> ctx;
  Status st = Context::Create(args, &ctx);
  if (st.ok()) *out = reinterpret_cast<ferry_context_t*>(ctx.release());
  return st;
}

void Fini(ferry_context_t* ctx) {
  delete Ctx(ctx);
}

Status Query(ferry_context_t* ctx, ferry_context_info_t* info) {
  if (ctx == nullptr || info == nullptr) {
    return Error(FERRY_INVALID_ARGUMENT, "shm: query() needs a context and info");
  }
  Ctx(ctx)->Query(info);
  return Status();
}

Status Progress(ferry_context_t* ctx, ferry_progress_args_t* args) {
  Status st = Ctx(ctx)->Progress(args);
  if (!st.ok()) FERRY_PLUGIN_LOG(FERRY_LOG_ERROR, "%s", st.message.c_str());
  return st;
}

Status Listen(ferry_context_t* ctx, const ferry_listen_args_t* args,
              ferry_listener_t** out) {
  if (args == nullptr || out == nullptr ||
      args->struct_size < FERRY_STRUCT_SIZE(ferry_listen_args_t, address)) {
    return Error(FERRY_INVALID_ARGUMENT, "shm: listen() args are missing");
  }
  void* ud = FERRY_FIELD_PRESENT(args, ferry_listen_args_t, user_data) ? args->user_data
                                                                       : nullptr;
  Listener* l = nullptr;
  Status st = Ctx(ctx)->Listen(args->address, ud, &l);
  if (st.ok()) *out = reinterpret_cast<ferry_listener_t*>(l);
  return st;
}

Status ListenerAddress(ferry_listener_t* listener, char* buf, uint64_t buf_len) {
  const std::string& path = Lis(listener)->path;
  if (buf == nullptr || path.size() + 1 > buf_len) {
    return Error(FERRY_RESOURCE_EXHAUSTED, "shm: the listener address needs %zu bytes",
                 path.size() + 1);
  }
  std::memcpy(buf, path.c_str(), path.size() + 1);
  return Status();
}

// The listener's context: kept beside it, since close_listener gets only
// the listener handle.
void CloseListener(ferry_listener_t* listener) {
  Listener* l = Lis(listener);
  l->owner->CloseListener(l);
}

Status Connect(ferry_context_t* ctx, const ferry_connect_args_t* args,
               ferry_conn_t** out) {
  if (args == nullptr || out == nullptr ||
      args->struct_size < FERRY_STRUCT_SIZE(ferry_connect_args_t, address)) {
    return Error(FERRY_INVALID_ARGUMENT, "shm: connect() args are missing");
  }
  void* ud = FERRY_FIELD_PRESENT(args, ferry_connect_args_t, user_data) ? args->user_data
                                                                        : nullptr;
  Conn* c = nullptr;
  Status st = Ctx(ctx)->Connect(args->address, ud, &c);
  if (st.ok()) *out = c->handle();
  return st;
}

void SetConnUserData(ferry_conn_t* conn, void* user_data) {
  Conn::From(conn)->SetUserData(user_data);
}

Status Send(ferry_conn_t* conn, const ferry_send_args_t* args) {
  Conn* c = Conn::From(conn);
  InCall in(c);
  return c->Send(args);
}

Status Place(ferry_conn_t* conn, const ferry_place_args_t* args) {
  Conn* c = Conn::From(conn);
  InCall in(c);
  return c->Place(args);
}

Status Discard(ferry_conn_t* conn, uint64_t msg_id) {
  Conn* c = Conn::From(conn);
  InCall in(c);
  return c->Discard(msg_id);
}

void Close(ferry_conn_t* conn) {
  Conn* c = Conn::From(conn);
  InCall in(c);
  c->Close();
}

Status ConnPeerAddress(ferry_conn_t* conn, char* buf, uint64_t buf_len) {
  Conn* c = Conn::From(conn);
  InCall in(c);
  return c->PeerAddress(buf, buf_len);
}

}  // namespace ferry_shm::host_calls
