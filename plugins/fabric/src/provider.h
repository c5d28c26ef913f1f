// Choosing the libfabric provider entry (fi_info) a context runs on. The
// hints say what the plugin needs and what it can cope with:
//   - reliable datagram endpoints (FI_EP_RDM) with FI_MSG;
//   - FI_RMA + FI_READ + FI_REMOTE_READ when RMA reads carry large segments
//     (asked first; without them the chunked-message fallback is used);
//   - FI_HMEM when device memory should pass through (see Config::hmem);
//   - every mr_mode bit the plugin honours (FI_MR_LOCAL, FI_MR_VIRT_ADDR,
//     FI_MR_ALLOCATED, FI_MR_PROV_KEY, FI_MR_ENDPOINT, FI_MR_HMEM), so
//     providers that demand them (EFA: provider keys, virtual addresses,
//     allocated memory, and local descriptors, which it takes when offered
//     and newer versions require) are eligible. FI_MR_RAW and FI_MR_MMU_NOTIFY are not
//     offered: a provider that demands them is not selected;
//   - FI_CONTEXT / FI_CONTEXT2 modes (every op context starts with an
//     fi_context2) and FI_RX_CQ_DATA (the plugin never uses remote CQ data).
#pragma once

#include "config.h"
#include "status.h"

#include <rdma/fabric.h>

#include <memory>
#include <string>
#include <vector>

namespace ferry_fabric {

struct FiInfoDeleter {
  void operator()(fi_info* info) const { fi_freeinfo(info); }
};
using InfoPtr = std::unique_ptr<fi_info, FiInfoDeleter>;

struct Selection {
  InfoPtr info;              // one entry (next == NULL), owned
  uint32_t api_version = 0;  // what fi_getinfo was asked for
  bool rma = false;          // FI_RMA granted and wanted
  bool hmem = false;         // FI_HMEM granted
  // Why hmem=auto left FI_HMEM out although a GPU driver and a provider
  // entry with it were there (empty otherwise); `ferry info` says it.
  std::string hmem_declined;
};

// Runs fi_getinfo with the hints above. FERRY_UNAVAILABLE with a message that
// names the provider, fi_strerror's words, the providers that *are* usable
// here, and what to set, when nothing matches.
Status SelectProvider(const Config& config, Selection* out);

// The providers fi_getinfo offers for RDM messaging here, in libfabric's
// order of preference, without duplicates ("tcp;ofi_rxm", "shm", ...).
std::vector<std::string> UsableProviders(uint32_t api_version);

// "FI_MR_LOCAL|FI_MR_VIRT_ADDR" ("none" for 0).
std::string MrModeText(uint64_t mr_mode);

}  // namespace ferry_fabric
