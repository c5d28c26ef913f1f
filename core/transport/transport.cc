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

bool VtableHas(const ferry_transport_vtable_t* vtable, size_t offset, size_t entry_size) {
  if (vtable == nullptr || offset + entry_size > vtable->struct_size) return false;
  void* fn = nullptr;
  std::memcpy(&fn, reinterpret_cast<const char*>(vtable) + offset, sizeof fn);
  return fn != nullptr;
}

// Calls plugin entry `fn` (vtable entry `entry`; NULL when the vtable lacks
// it) with an exception guard; the plugin's message, if any, is in `err`.
#define FERRY_CALL_ENTRY(fn, entry, err, ...)   \
  [&]() -> Status {                             \
    const auto fn_ = (fn);                      \
    if (fn_ == nullptr) return Missing(#entry); \
    ferry_status_t rc_;                         \
    try {                                       \
      rc_ = fn_(__VA_ARGS__);                   \
    } catch (...) {                             \
      return Threw(#entry);                     \
    }                                           \
    if (rc_ == FERRY_OK) return Status();       \
    return Failed(#entry, rc_, (err).text);     \
  }()

// The same for the rarely called entries, presence-checked at each call.
#define FERRY_GUARDED_CALL(entry, err, ...)                                          \
  FERRY_CALL_ENTRY(Has(FERRY_VT(entry)) ? plugin_->vtable()->entry : nullptr, entry, \
                   err, __VA_ARGS__)

#define FERRY_GUARDED_VOID(entry, ...)                                 \
  do {                                                                 \
    if (!Has(FERRY_VT(entry))) break;                                  \
    try {                                                              \
      plugin_->vtable()->entry(__VA_ARGS__);                           \
    } catch (...) {                                                    \
      FERRY_LOG(FERRY_LOG_ERROR, "transport",                          \
                "transport '" + name() + "' threw from " #entry ": " + \
                    Describe(std::current_exception()));               \
    }                                                                  \
  } while (0)

StatusOr<std::unique_ptr<Transport>> Transport::Open(std::shared_ptr<const Plugin> plugin,
                                                     uint32_t flags,
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
    return Status(FERRY_INTERNAL,
                  "transport '" + plugin->name() + "' init returned OK but no context");
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
  // Device memory services: all three entries, and a device memory kind.
  has_device_memory_ = (info_.memory_kinds & ~FERRY_MEM_HOST) != 0 &&
                       Has(FERRY_VT(mem_alloc)) && Has(FERRY_VT(mem_free)) &&
                       Has(FERRY_VT(mem_copy));
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
  return Status(FERRY_INTERNAL, "transport '" + name() + "' threw from " + entry + ": " +
                                    Describe(std::current_exception()));
}

Status Transport::Failed(const char* entry, ferry_status_t rc, const char* text) const {
  if (text != nullptr && text[0] != '\0') return Status(rc, text);
  return Status(rc, "transport '" + name() + "' " + entry +
                        " failed without a message (" + StatusCodeName(rc) + ")");
}

Transport::~Transport() {
  FERRY_GUARDED_VOID(fini, ctx_);
}

bool Transport::Has(size_t vtable_offset) const {
  return VtableHas(plugin_->vtable(), vtable_offset, sizeof(void*));
}

Status Transport::Progress(ferry_event_t* events, uint32_t max_events,
                           uint32_t* num_events) {
  *num_events = 0;
  ferry_progress_args_t args{};
  args.struct_size = sizeof args;
  args.max_events = max_events;
  args.events = events;
  args.event_stride = sizeof(ferry_event_t);
  ErrorText err;  // progress has no error buffer: stays empty
  Status st = FERRY_CALL_ENTRY(progress_, progress, err, ctx_, &args);
  if (!st.ok()) return st;
  if (args.num_events > max_events) {
    return Status(FERRY_INTERNAL,
                  "transport '" + name() + "' returned more events than asked for");
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

// The per-message calls go through the entries resolved at construction.
Status Transport::Send(ferry_conn_t* conn, const ferry_send_args_t& args) {
  ErrorText err;
  return FERRY_CALL_ENTRY(send_, send, err, conn, &args, &err.buf);
}

Status Transport::Place(ferry_conn_t* conn, const ferry_place_args_t& args) {
  ErrorText err;
  return FERRY_CALL_ENTRY(place_, place, err, conn, &args, &err.buf);
}

Status Transport::Discard(ferry_conn_t* conn, uint64_t msg_id) {
  ErrorText err;
  return FERRY_CALL_ENTRY(discard_, discard, err, conn, msg_id, &err.buf);
}

void Transport::Close(ferry_conn_t* conn) {
  FERRY_GUARDED_VOID(close, conn);
}

Status Transport::Reg(const ferry_reg_args_t& args, ferry_mr_t** out) {
  ErrorText err;
  return FERRY_GUARDED_CALL(reg, err, ctx_, &args, out, &err.buf);
}

void Transport::Dereg(ferry_mr_t* mr) {
  FERRY_GUARDED_VOID(dereg, ctx_, mr);
}

StatusOr<std::string> Transport::PeerAddress(ferry_conn_t* conn) {
  char buf[1024] = {0};
  ErrorText err;
  Status st = FERRY_GUARDED_CALL(conn_peer_address, err, conn, buf, sizeof buf);
  if (!st.ok()) return st;
  return std::string(buf);
}

StatusOr<void*> Transport::MemAlloc(ferry_device_t device, uint64_t length) {
  ErrorText err;
  void* out = nullptr;
  Status st = FERRY_GUARDED_CALL(mem_alloc, err, ctx_, device, length, &out, &err.buf);
  if (!st.ok()) return st;
  if (out == nullptr) {
    return Status(FERRY_INTERNAL,
                  "transport '" + name() + "' mem_alloc returned OK but no memory");
  }
  return out;
}

void Transport::MemFree(ferry_device_t device, void* data) {
  FERRY_GUARDED_VOID(mem_free, ctx_, device, data);
}

Status Transport::MemCopy(void* dst, ferry_device_t dst_device, const void* src,
                          ferry_device_t src_device, uint64_t length,
                          uint64_t src_stream) {
  ErrorText err;
  return FERRY_GUARDED_CALL(mem_copy, err, ctx_, dst, dst_device, src, src_device, length,
                            src_stream, &err.buf);
}

}  // namespace ferry
