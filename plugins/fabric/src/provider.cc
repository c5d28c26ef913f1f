#include "provider.h"

#include "fi_error.h"

#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace ferry_fabric {
namespace {

// The mr_mode bits this plugin knows how to honour (registration.h).
constexpr uint64_t kHonouredMrMode =
    FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;

uint32_t ApiVersion() {
  // Never ask for a newer API than the library we run against.
  uint32_t compiled = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
  uint32_t runtime = fi_version();
  return std::min(compiled, runtime);
}

// Asking for FI_HMEM changes which provider entries match and can move a
// provider onto slower host-memory paths, so "auto" asks only where a GPU
// driver is installed.
bool GpuDriverPresent(const Config& config) {
  if (config.gpu_driver != Tristate::kAuto) return config.gpu_driver == Tristate::kOn;
  return access("/dev/nvidiactl", F_OK) == 0 || access("/dev/kfd", F_OK) == 0;
}

InfoPtr MakeHints(const Config& config, bool rma, bool hmem, bool with_provider) {
  InfoPtr hints(fi_allocinfo());
  if (!hints) return hints;
  hints->caps = FI_MSG;
  if (rma) hints->caps |= FI_RMA | FI_READ | FI_REMOTE_READ;
  if (hmem) hints->caps |= FI_HMEM;
  hints->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode =
      static_cast<int>(kHonouredMrMode | (hmem ? FI_MR_HMEM : 0));
  // The plugin serialises every call on a context under its own lock.
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  // Receiver-not-ready is the provider's to absorb (queue and retry), so a
  // message is never dropped for lack of a posted buffer.
  hints->domain_attr->resource_mgmt = FI_RM_ENABLED;
  if (with_provider && !config.provider.empty()) {
    hints->fabric_attr->prov_name = strdup(config.provider.c_str());
  }
  if (!config.fabric_name.empty()) {
    hints->fabric_attr->name = strdup(config.fabric_name.c_str());
  }
  if (!config.domain_name.empty()) {
    hints->domain_attr->name = strdup(config.domain_name.c_str());
  }
  return hints;
}

struct Attempt {
  bool rma;
  bool hmem;
};

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

}  // namespace

std::string MrModeText(uint64_t mr_mode) {
  static const struct {
    uint64_t bit;
    const char* name;
  } kBits[] = {{FI_MR_LOCAL, "FI_MR_LOCAL"},
               {FI_MR_RAW, "FI_MR_RAW"},
               {FI_MR_VIRT_ADDR, "FI_MR_VIRT_ADDR"},
               {FI_MR_ALLOCATED, "FI_MR_ALLOCATED"},
               {FI_MR_PROV_KEY, "FI_MR_PROV_KEY"},
               {FI_MR_MMU_NOTIFY, "FI_MR_MMU_NOTIFY"},
               {FI_MR_RMA_EVENT, "FI_MR_RMA_EVENT"},
               {FI_MR_ENDPOINT, "FI_MR_ENDPOINT"},
               {FI_MR_HMEM, "FI_MR_HMEM"}};
  std::string out;
  for (const auto& b : kBits) {
    if (mr_mode & b.bit) out += (out.empty() ? "" : "|") + std::string(b.name);
  }
  return out.empty() ? "none" : out;
}

std::vector<std::string> UsableProviders(uint32_t api_version) {
  std::vector<std::string> names;
  Config any;
  InfoPtr hints = MakeHints(any, /*rma=*/false, /*hmem=*/false,
                            /*with_provider=*/false);
  if (!hints) return names;
  fi_info* list = nullptr;
  if (fi_getinfo(api_version, nullptr, nullptr, 0, hints.get(), &list) != 0) {
    return names;
  }
  for (fi_info* i = list; i != nullptr; i = i->next) {
    std::string n = i->fabric_attr->prov_name ? i->fabric_attr->prov_name : "?";
    if (std::find(names.begin(), names.end(), n) == names.end()) {
      names.push_back(n);
    }
  }
  fi_freeinfo(list);
  return names;
}

Status SelectProvider(const Config& config, Selection* out) {
  const uint32_t api = ApiVersion();
  const bool try_hmem = config.hmem == Tristate::kOn ||
                        (config.hmem == Tristate::kAuto && GpuDriverPresent(config));
  std::vector<Attempt> attempts;
  for (bool rma : {true, false}) {
    if (rma && config.rma == Tristate::kOff) continue;
    if (!rma && config.rma == Tristate::kOn) continue;
    if (try_hmem) attempts.push_back({rma, true});
    if (config.hmem != Tristate::kOn) attempts.push_back({rma, false});
  }
  int first_rc = 0;
  std::string declined;
  InfoPtr declined_entry;  // taken after all if nothing else matches
  bool declined_rma = false;
  for (size_t i = 0; i < attempts.size(); ++i) {
    const Attempt& a = attempts[i];
    InfoPtr hints = MakeHints(config, a.rma, a.hmem, /*with_provider=*/true);
    if (!hints) return Error(FERRY_RESOURCE_EXHAUSTED, "fabric: fi_allocinfo failed");
    fi_info* list = nullptr;
    int rc = fi_getinfo(api, nullptr, nullptr, 0, hints.get(), &list);
    if (rc != 0 || list == nullptr) {
      if (first_rc == 0) first_rc = rc != 0 ? rc : -FI_ENODATA;
      continue;
    }
    // Keep the first (preferred) entry only.
    fi_info* rest = list->next;
    list->next = nullptr;
    if (rest != nullptr) fi_freeinfo(rest);
    InfoPtr entry(list);
    // hmem=auto must not cost host memory its latency path: libfabric's shm
    // provider, given FI_HMEM, offers no fi_inject at all (inject_size 0),
    // so every small message would take a send with a completion, which
    // roughly doubles what the plugin adds to a 64-byte round trip. Device
    // memory between processes of one host is the CUDA IPC transport's
    // (DESIGN.md); hmem=on still takes the entry.
    const bool next_is_host_only =
        i + 1 < attempts.size() && attempts[i + 1].rma == a.rma && !attempts[i + 1].hmem;
    if (a.hmem && config.hmem == Tristate::kAuto && next_is_host_only &&
        (entry->caps & FI_HMEM) != 0 && entry->tx_attr->inject_size == 0) {
      declined = std::string("provider ") + entry->fabric_attr->prov_name +
                 " offers no fi_inject with FI_HMEM, which would slow every "
                 "small message; FERRY_FABRIC_HMEM=on takes it anyway";
      if (!declined_entry) {
        declined_entry = std::move(entry);
        declined_rma = a.rma;
      }
      continue;
    }
    out->info = std::move(entry);
    out->api_version = api;
    out->rma = a.rma && (out->info->caps & FI_RMA) != 0;
    out->hmem = a.hmem && (out->info->caps & FI_HMEM) != 0;
    if (!out->hmem) out->hmem_declined = declined;
    return Status();
  }
  if (declined_entry) {
    // No host-memory entry after all: the FI_HMEM one, without inject, is
    // better than none.
    out->info = std::move(declined_entry);
    out->api_version = api;
    out->rma = declined_rma && (out->info->caps & FI_RMA) != 0;
    out->hmem = true;
    return Status();
  }

  const std::string wanted = config.provider.empty() ? std::string("(libfabric's choice)")
                                                     : "'" + config.provider + "'";
  std::string what = "reliable-datagram (FI_EP_RDM) messaging";
  if (config.rma == Tristate::kOn) what += " with FI_RMA (rma=on)";
  if (config.hmem == Tristate::kOn) what += " with FI_HMEM (hmem=on)";
  if (!config.fabric_name.empty()) what += ", fabric '" + config.fabric_name + "'";
  if (!config.domain_name.empty()) what += ", domain '" + config.domain_name + "'";
  return Error(FERRY_UNAVAILABLE,
               "fabric: libfabric provider %s is not usable here for %s: fi_getinfo "
               "failed: %s (%d). Providers usable for RDM messaging on this machine: "
               "%s. Set FERRY_FABRIC_PROVIDER to one of them (or unset it to let "
               "libfabric choose); 'efa' needs an EFA-enabled instance with the EFA "
               "kernel driver, 'verbs;ofi_rxm' an RDMA device.",
               wanted.c_str(), what.c_str(), fi_strerror(-first_rc), first_rc,
               JoinNames(UsableProviders(api)).c_str());
}

}  // namespace ferry_fabric
