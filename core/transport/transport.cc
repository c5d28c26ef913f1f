#include "transport/transport.h"

#include "common/log.h"

#include <cstring>
#include <exception>
#include <string>
#include <utility>

namespace ferry {
namespace {

// A caller-owned error buffer for one control-path call.
// Only text[0] is cleared: these sit on the hot path (send, place, discard,
// progress) and zero-filling 1 KiB per call cost ~5% of busy-poll CPU.
struct ErrorText {
  char text[1024];
  ferry_error_buf_t buf{};
  ErrorText() {
    text[0] = '\0';
    buf.struct_size = sizeof buf;
    buf.data = text;
    buf.capacity = sizeof text;
  }
  std::string Or(const std::string& fallback) const {
    return text[0] != '\0' ? std::string(text) : fallback;
  }
};

std::string Describe(const std::exception_ptr& ep) {
  try {
    std::rethrow_exception(ep);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

}  // namespace

bool VtableHas(const ferry_transport_vtable_t* vtable, size_t offset,
               size_t entry_size) {
  if (vtable == nullptr || offset + entry_size > vtable->struct_size) return false;
  void* fn = nullptr;
  std::memcpy(&fn, reinterpret_cast<const char*>(vtable) + offset, sizeof fn);
  return fn != nullptr;
}

// Calls plugin entry `name` with presence check and exception guard.
// `call` returns ferry_status_t; the plugin's message, if any, is in `err`.
#define FERRY_GUARDED_CALL(entry, err, ...)                                    \
  [&]() -> Status {                                                            \
    if (!Has(FERRY_VT(entry))) {                                               \
      return Status(FERRY_UNIMPLEMENTED,                                       \
                    "transport '" + name() + "' does not implement " #entry);  \
    }                                                                          \
    ferry_status_t rc_;                                                        \
    try {                                                                      \
      rc_ = plugin_->vtable()->entry(__VA_ARGS__);                             \
    } catch (...) {                                                            \
      return Status(FERRY_INTERNAL, "transport '" + name() + "' threw from " #entry \
                                    ": " + Describe(std::current_exception())); \
    }                                                                          \
    if (rc_ == FERRY_OK) return Status();                                      \
    return Status(rc_, (err).Or("transport '" + name() + "' " #entry " failed " \
                                "without a message (" + StatusCodeName(rc_) + ")")); \
  }()

#define FERRY_GUARDED_VOID(entry, ...)                                         \
  do {                                                                         \
    if (!Has(FERRY_VT(entry))) break;                                          \
    try {                                                                      \
      plugin_->vtable()->entry(__VA_ARGS__);                                   \
    } catch (...) {                                                            \
      FERRY_LOG(FERRY_LOG_ERROR, "transport",                                  \
                "transport '" + name() + "' threw from " #entry ": " +          \
                    Describe(std::current_exception()));                       \
    }                                                                          \
  } while (0)

StatusOr<std::unique_ptr<Transport>> Transport::Open(
    std::shared_ptr<const Plugin> plugin, uint32_t flags,
    const std::string& instance) {
  const ferry_transport_vtable_t* vt = plugin->vtable();
  ferry_init_args_t args{};
  args.struct_size = sizeof args;
  args.flags = flags;
  args.instance = instance.empty() ? nullptr : instance.c_str();
  ErrorText err;
  ferry_context_t* ctx = nullptr;
  ferry_status_t rc;
  try {
    rc = vt->init(&args, &ctx, &err.buf);
  } catch (...) {
    return Status(FERRY_INTERNAL, "transport '" + plugin->name() +
                                      "' threw a C++ exception from init: " +
                                      Describe(std::current_exception()) +
                                      "; the plugin must catch its exceptions");
  }
  if (rc != FERRY_OK) {
    return Status(rc, "transport '" + plugin->name() + "' cannot start: " +
                          err.Or(std::string("init failed with ") + StatusCodeName(rc)));
  }
  if (ctx == nullptr) {
    return Status(FERRY_INTERNAL, "transport '" + plugin->name() +
                                      "' init returned OK but no context");
  }
  std::unique_ptr<Transport> t(new Transport(std::move(plugin), ctx));
  Status st = t->QueryInfo();
  if (!st.ok()) return st;
  return t;
}

Status Transport::QueryInfo() {
  info_ = ferry_context_info_t{};
  info_.struct_size = sizeof info_;
  info_.wakeup_fd = -1;
  ErrorText err;
  Status st = FERRY_GUARDED_CALL(query, err, ctx_, &info_);
  if (!st.ok()) return st;
  info_.struct_size = sizeof info_;
  if (info_.domain != nullptr) domain_ = info_.domain;
  if (info_.description != nullptr) description_ = info_.description;
  // Point the copied info at our own strings: the plugin's stay valid only
  // until fini, ours as long as this object.
  info_.domain = domain_.c_str();
  info_.description = description_.c_str();
  if ((info_.caps & FERRY_CAP_WAKEUP_FD) == 0) info_.wakeup_fd = -1;
  return Status();
}

Transport::Transport(std::shared_ptr<const Plugin> plugin, ferry_context_t* ctx)
    : plugin_(std::move(plugin)), ctx_(ctx) {
  const ferry_transport_vtable_t* vt = plugin_->vtable();
  if (Has(FERRY_VT(progress))) progress_ = vt->progress;
  if (Has(FERRY_VT(send))) send_ = vt->send;
  if (Has(FERRY_VT(place))) place_ = vt->place;
  if (Has(FERRY_VT(discard))) discard_ = vt->discard;
}

Status Transport::Missing(const char* entry) const {
  return Status(FERRY_UNIMPLEMENTED,
                "transport '" + name() + "' does not implement " + entry);
}

Status Transport::Threw(const char* entry) const {
  return Status(FERRY_INTERNAL, "transport '" + name() + "' threw from " + entry +
                                    ": " + Describe(std::current_exception()));
}

Status Transport::Failed(const char* entry, ferry_status_t rc, const char* text) const {
  if (text != nullptr && text[0] != '\0') return Status(rc, text);
  return Status(rc, "transport '" + name() + "' " + entry + " failed without a message (" +
                        StatusCodeName(rc) + ")");
}

Transport::~Transport() { FERRY_GUARDED_VOID(fini, ctx_); }

bool Transport::Has(size_t vtable_offset) const {
  return VtableHas(plugin_->vtable(), vtable_offset, sizeof(void*));
}

Status Transport::Progress(ferry_event_t* events, uint32_t max_events,
                           uint32_t* num_events) {
  *num_events = 0;
  if (progress_ == nullptr) return Missing("progress");
  ferry_progress_args_t args{};
  args.struct_size = sizeof args;
  args.max_events = max_events;
  args.events = events;
  args.event_stride = sizeof(ferry_event_t);
  ferry_status_t rc;
  try {
    rc = progress_(ctx_, &args);
  } catch (...) {
    return Threw("progress");
  }
  if (rc != FERRY_OK) return Failed("progress", rc, nullptr);
  if (args.num_events > max_events) {
    return Status(FERRY_INTERNAL, "transport '" + name() + "' returned more events than asked for");
  }
  *num_events = args.num_events;
  return Status();
}

Status Transport::Listen(const std::string& address, void* user_data,
                         ferry_listener_t** out) {
  ferry_listen_args_t args{};
  args.struct_size = sizeof args;
  args.address = address.c_str();
  args.user_data = user_data;
  ErrorText err;
  return FERRY_GUARDED_CALL(listen, err, ctx_, &args, out, &err.buf);
}

StatusOr<std::string> Transport::ListenerAddress(ferry_listener_t* listener) {
  char buf[1024] = {0};
  ErrorText err;
  Status st = FERRY_GUARDED_CALL(listener_address, err, listener, buf, sizeof buf);
  if (!st.ok()) return st;
  return std::string(buf);
}

void Transport::CloseListener(ferry_listener_t* listener) {
  FERRY_GUARDED_VOID(close_listener, listener);
}

Status Transport::Connect(const std::string& address, void* user_data,
                          ferry_conn_t** out) {
  ferry_connect_args_t args{};
  args.struct_size = sizeof args;
  args.address = address.c_str();
  args.user_data = user_data;
  ErrorText err;
  return FERRY_GUARDED_CALL(connect, err, ctx_, &args, out, &err.buf);
}

void Transport::SetConnUserData(ferry_conn_t* conn, void* user_data) {
  FERRY_GUARDED_VOID(set_conn_user_data, conn, user_data);
}

// The three per-message calls, like FERRY_GUARDED_CALL but through the
// entries resolved at construction.
#define FERRY_HOT_CALL(entry, ...)                                             \
  do {                                                                         \
    if (entry##_ == nullptr) return Missing(#entry);                           \
    ErrorText err;                                                             \
    ferry_status_t rc;                                                         \
    try {                                                                      \
      rc = entry##_(__VA_ARGS__, &err.buf);                                    \
    } catch (...) {                                                            \
      return Threw(#entry);                                                    \
    }                                                                          \
    if (rc == FERRY_OK) return Status();                                       \
    return Failed(#entry, rc, err.text);                                       \
  } while (0)

Status Transport::Send(ferry_conn_t* conn, const ferry_send_args_t& args) {
  FERRY_HOT_CALL(send, conn, &args);
}

Status Transport::Place(ferry_conn_t* conn, const ferry_place_args_t& args) {
  FERRY_HOT_CALL(place, conn, &args);
}

Status Transport::Discard(ferry_conn_t* conn, uint64_t msg_id) {
  FERRY_HOT_CALL(discard, conn, msg_id);
}

#undef FERRY_HOT_CALL

void Transport::Close(ferry_conn_t* conn) { FERRY_GUARDED_VOID(close, conn); }

Status Transport::Reg(const ferry_reg_args_t& args, ferry_mr_t** out) {
  ErrorText err;
  return FERRY_GUARDED_CALL(reg, err, ctx_, &args, out, &err.buf);
}

void Transport::Dereg(ferry_mr_t* mr) { FERRY_GUARDED_VOID(dereg, ctx_, mr); }

StatusOr<std::string> Transport::PeerAddress(ferry_conn_t* conn) {
  char buf[1024] = {0};
  ErrorText err;
  Status st = FERRY_GUARDED_CALL(conn_peer_address, err, conn, buf, sizeof buf);
  if (!st.ok()) return st;
  return std::string(buf);
}

}  // namespace ferry
