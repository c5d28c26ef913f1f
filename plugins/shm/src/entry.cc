// The shm plugin's one exported symbol: what it answers at negotiation and
// which function (host_calls.h) fills each vtable slot. The entry shim
// (ferry_plugin/entry.h) guards every slot and defines the symbol.
#include "host_calls.h"

#include "ferry_plugin/entry.h"

#include <ferry/transport.h>

namespace ferry_shm {
namespace {

struct ShmPlugin {
  static constexpr ferry_plugin::PluginInfo kInfo = {
      "shm", "0.1.0", 1, FERRY_TRANSPORT_ABI_MINOR, FERRY_FEATURE_MULTI_CONTEXT};
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
  // Not needed: any host memory can be sent and placed.
  static constexpr auto reg = nullptr;
  static constexpr auto dereg = nullptr;
  static constexpr auto conn_peer_address = host_calls::ConnPeerAddress;
};

}  // namespace
}  // namespace ferry_shm

FERRY_PLUGIN_ENTRY(ferry_shm::ShmPlugin)
