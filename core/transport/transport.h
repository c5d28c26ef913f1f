// ferry::Transport: one context of a loaded plugin, with every vtable call
// presence-checked (a missing entry is UNIMPLEMENTED, never a crash) and
// guarded (a C++ exception escaping a plugin becomes INTERNAL). This is the
// only place the core calls plugin code; conformance and benchmarks use it
// too, so they exercise exactly what the core does.
#pragma once

#include "common/status.h"
#include "loader/plugin_loader.h"

#include <ferry/transport.h>

#include <cstddef>
#include <memory>
#include <string>

namespace ferry {

class Transport {
 public:
  // init() with `flags` (FERRY_INIT_*), then query().
  static StatusOr<std::unique_ptr<Transport>> Open(std::shared_ptr<const Plugin> plugin,
                                                   uint32_t flags = 0,
                                                   const std::string& instance = "");
  ~Transport();  // fini()
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  const Plugin& plugin() const { return *plugin_; }
  const std::string& name() const { return plugin_->name(); }
  ferry_context_t* context() const { return ctx_; }
  // The query() answer, copied at Open (strings copied too).
  const ferry_context_info_t& info() const { return info_; }
  const std::string& domain() const { return domain_; }
  const std::string& description() const { return description_; }
  bool HasCap(uint64_t cap) const { return (info_.caps & cap) != 0; }

  // True when the vtable carries entry `offset` (offsetof into the vtable)
  // and it is non-NULL.
  bool Has(size_t vtable_offset) const;

  Status Progress(ferry_event_t* events, uint32_t max_events, uint32_t* num_events);
  Status Listen(const std::string& address, void* user_data, ferry_listener_t** out);
  StatusOr<std::string> ListenerAddress(ferry_listener_t* listener);
  void CloseListener(ferry_listener_t* listener);
  Status Connect(const std::string& address, void* user_data, ferry_conn_t** out);
  void SetConnUserData(ferry_conn_t* conn, void* user_data);
  Status Send(ferry_conn_t* conn, const ferry_send_args_t& args);
  Status Place(ferry_conn_t* conn, const ferry_place_args_t& args);
  Status Discard(ferry_conn_t* conn, uint64_t msg_id);
  void Close(ferry_conn_t* conn);
  Status Reg(const ferry_reg_args_t& args, ferry_mr_t** out);
  void Dereg(ferry_mr_t* mr);
  StatusOr<std::string> PeerAddress(ferry_conn_t* conn);

  // Device memory services (ABI 0.2; transport.h): present only on a plugin
  // that offers all three and moves device memory. Callable from any thread,
  // without the per-transport call lock.
  bool has_device_memory() const { return has_device_memory_; }
  StatusOr<void*> MemAlloc(ferry_device_t device, uint64_t length);
  void MemFree(ferry_device_t device, void* data);
  Status MemCopy(void* dst, ferry_device_t dst_device, const void* src,
                 ferry_device_t src_device, uint64_t length, uint64_t src_stream);

 private:
  Transport(std::shared_ptr<const Plugin> plugin, ferry_context_t* ctx);
  Status QueryInfo();
  // The failure statuses of the hot entries (kept out of line).
  Status Missing(const char* entry) const;
  Status Threw(const char* entry) const;
  Status Failed(const char* entry, ferry_status_t rc, const char* text) const;

  std::shared_ptr<const Plugin> plugin_;
  ferry_context_t* ctx_;
  // Every message passes through these entries: resolved once (NULL when
  // the vtable lacks them), so a call costs no presence check.
  decltype(ferry_transport_vtable_t::progress) progress_ = nullptr;
  decltype(ferry_transport_vtable_t::send) send_ = nullptr;
  decltype(ferry_transport_vtable_t::place) place_ = nullptr;
  decltype(ferry_transport_vtable_t::discard) discard_ = nullptr;
  ferry_context_info_t info_{};
  std::string domain_, description_;
  bool has_device_memory_ = false;
};

// Presence check usable without a Transport (conformance probes vtables).
bool VtableHas(const ferry_transport_vtable_t* vtable, size_t offset, size_t entry_size);

}  // namespace ferry

// FERRY_VT(name): the offset of vtable entry `name`, for Transport::Has.
#define FERRY_VT(name) offsetof(ferry_transport_vtable_t, name)
