#include "config.h"

#include "ferry_plugin/host.h"
#include "ferry_plugin/log.h"
#include "ferry_plugin/params.h"

#include <ferry/transport.h>

#include <cstring>

namespace ferry_fabric {
namespace {

using ferry_plugin::IntParam;
using ferry_plugin::StringParam;

constexpr const char* kPlugin = "fabric";

Tristate TristateParam(const char* key) {
  std::string v;
  if (ferry_plugin::GetParamText(key, &v) != ferry_plugin::ParamText::kSet || v.empty() ||
      v == "auto") {
    return Tristate::kAuto;
  }
  if (v == "1" || v == "on" || v == "yes" || v == "true") return Tristate::kOn;
  if (v == "0" || v == "off" || v == "no" || v == "false") return Tristate::kOff;
  FERRY_PLUGIN_LOG(FERRY_LOG_WARN, "parameter %s='%s' is not auto/on/off; using auto",
                   key, v.c_str());
  return Tristate::kAuto;
}

}  // namespace

const char* TristateName(Tristate t) {
  switch (t) {
    case Tristate::kOn:
      return "on";
    case Tristate::kOff:
      return "off";
    default:
      return "auto";
  }
}

Config LoadConfig(uint32_t init_flags) {
  Config c;
  c.provider = StringParam("provider", "");
  c.fabric_name = StringParam("fabric_name", "");
  c.domain_name = StringParam("domain_name", "");
  c.rma = TristateParam("rma");
  c.hmem = TristateParam("hmem");
  c.force_mr_local = IntParam("force_mr_local", 0, 0, 1) != 0;
  c.busy_poll =
      (init_flags & FERRY_INIT_BUSY_POLL) != 0 || IntParam("busy_poll", 0, 0, 1) != 0;
  c.inject = IntParam("inject", 1, 0, 1) != 0;
  c.eager_size =
      static_cast<uint32_t>(IntParam("eager_size", c.eager_size, 4096, 1u << 20));
  c.max_header_size = static_cast<uint32_t>(
      IntParam("max_header_size", c.max_header_size, 64, c.eager_size / 2));
  c.max_segments = static_cast<uint32_t>(IntParam("max_segments", c.max_segments, 1, 64));
  c.max_inline_size = static_cast<uint32_t>(
      IntParam("max_inline_size", c.max_inline_size, 0, c.eager_size / 2));
  c.max_message_size =
      IntParam("max_message_size", c.max_message_size, 4096, uint64_t{1} << 50);
  c.rx_buffers = static_cast<uint32_t>(IntParam("rx_buffers", c.rx_buffers, 16, 65536));
  c.rx_posted =
      static_cast<uint32_t>(IntParam("rx_posted", c.rx_posted, 8, c.rx_buffers));
  c.tx_buffers = static_cast<uint32_t>(IntParam("tx_buffers", c.tx_buffers, 16, 65536));
  c.rma_chunk_size =
      IntParam("rma_chunk_size", c.rma_chunk_size, 4096, uint64_t{1} << 32);
  c.max_pending_sends = static_cast<uint32_t>(
      IntParam("max_pending_sends", c.max_pending_sends, 1, 1u << 24));
  c.max_spill_bytes =
      IntParam("max_spill_bytes", c.max_spill_bytes, 0, uint64_t{1} << 40);
  c.connect_timeout_ms = static_cast<uint32_t>(
      IntParam("connect_timeout_ms", c.connect_timeout_ms, 1, 3600000));
  c.close_timeout_ms =
      static_cast<uint32_t>(IntParam("close_timeout_ms", c.close_timeout_ms, 1, 3600000));
  c.priority = static_cast<int32_t>(
      ferry_host_param_int(ferry_plugin::HostServices(), kPlugin, "priority", -1));
  c.domain_override = StringParam("domain_override", "");
  c.gpu_driver = TristateParam("gpu_driver");
  c.cloexec_sweep = IntParam("cloexec_sweep", 1, 0, 1) != 0;
  return c;
}

}  // namespace ferry_fabric
