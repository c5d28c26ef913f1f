// The cuda_ipc plugin's one exported symbol: what it answers at negotiation
// and which function (host_calls.h) fills each vtable slot. The entry shim
// (ferry_plugin/entry.h) guards every slot.
#include "host_calls.h"

#include "ferry_plugin/entry.h"

#include <ferry/transport.h>

namespace ferry_cuda_ipc {

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
  // The device memory services (ABI 0.2): the core's default allocator of
  // device receive buffers and its staging copies.
  static constexpr auto mem_alloc = host_calls::MemAlloc;
  static constexpr auto mem_free = host_calls::MemFree;
  static constexpr auto mem_copy = host_calls::MemCopy;
};

}  // namespace ferry_cuda_ipc

FERRY_PLUGIN_ENTRY(ferry_cuda_ipc::CudaIpcPlugin)
