// The cuda_ipc plugin's one exported symbol: what it answers at negotiation
// and which function (host_calls.h) fills each vtable slot. The entry shim
// (ferry_plugin/entry.h) guards every slot; the 0.2 memory services, which
// the shim does not know yet, are guarded here the same way.
#include "host_calls.h"

#include "ferry_plugin/entry.h"

#include <ferry/transport.h>

namespace ferry_cuda_ipc {
namespace {

struct CudaIpcPlugin {
  // 0.2: ferry_segment_t::stream and the memory services are the contract.
  static constexpr ferry_plugin::PluginInfo kInfo = {
      "cuda_ipc", "0.1.0", 2, FERRY_TRANSPORT_ABI_MINOR, FERRY_FEATURE_MULTI_CONTEXT};
  static constexpr auto init = host_calls::Init;
  static constexpr auto fini = host_calls::Fini;
  static constexpr auto query = host_calls::Query;
  static constexpr auto progress = host_calls::Progress;
  static constexpr auto listen = host_calls::Listen;
  static constexpr auto listener_address = host_calls::ListenerAddress;
  static constexpr auto close_listener = host_calls::CloseListener;
  static constexpr auto connect = host_calls::Connect;
  static constexpr auto set_conn_user_data = host_calls::SetConnUserData;
  static constexpr auto send = host_calls::Send;
  static constexpr auto place = host_calls::Place;
  static constexpr auto discard = host_calls::Discard;
  static constexpr auto close = host_calls::Close;
  // Legacy IPC handles need no registration: reg/dereg are absent.
  static constexpr auto reg = nullptr;
  static constexpr auto dereg = nullptr;
  static constexpr auto conn_peer_address = host_calls::ConnPeerAddress;
};

ferry_status_t MemAlloc(ferry_context_t* ctx, ferry_device_t device, uint64_t length,
                        void** out, ferry_error_buf_t* err) noexcept {
  return ferry_plugin::Guard("mem_alloc", err, [&](Status* e) {
    return Report(e, host_calls::MemAlloc(ctx, device, length, out));
  });
}

void MemFree(ferry_context_t* ctx, ferry_device_t device, void* data) noexcept {
  (void)ferry_plugin::Guard("mem_free", nullptr, [&](Status*) {
    host_calls::MemFree(ctx, device, data);
    return FERRY_OK;
  });
}

ferry_status_t MemCopy(ferry_context_t* ctx, void* dst, ferry_device_t dst_device,
                       const void* src, ferry_device_t src_device, uint64_t length,
                       uint64_t src_stream, ferry_error_buf_t* err) noexcept {
  return ferry_plugin::Guard("mem_copy", err, [&](Status* e) {
    return Report(e, host_calls::MemCopy(ctx, dst, dst_device, src, src_device, length,
                                         src_stream));
  });
}

constexpr ferry_transport_vtable_t MakeVtable() {
  ferry_transport_vtable_t v = ferry_plugin::entry_detail::MakeVtable<CudaIpcPlugin>();
  v.mem_alloc = MemAlloc;
  v.mem_free = MemFree;
  v.mem_copy = MemCopy;
  return v;
}

constexpr ferry_transport_vtable_t kVtable = MakeVtable();

}  // namespace
}  // namespace ferry_cuda_ipc

// ferry_plugin::Negotiate<P> with this plugin's vtable (the shim's own
// would lack the memory services).
extern "C" FERRY_TRANSPORT_EXPORT ferry_status_t
ferry_transport_negotiate(ferry_negotiate_args_t* args) {
  using ferry_cuda_ipc::CudaIpcPlugin;
  return ferry_plugin::Guard("negotiate", nullptr, [&](ferry_plugin::Status*) {
    const ferry_plugin::PluginInfo& info = CudaIpcPlugin::kInfo;
    const ferry_status_t code =
        ferry_plugin_negotiate(args, info.name, info.version, info.minor_min,
                               info.minor_max, info.features, &ferry_cuda_ipc::kVtable);
    if (code == FERRY_OK) {
      ferry_plugin::SetPluginName(info.name);
      ferry_plugin::SetHostServices(args->host);
    }
    return code;
  });
}
