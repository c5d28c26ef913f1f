// The route of one message (route.h).
#include "engine/route.h"

namespace ferry::route {

uint64_t MemoryKindOf(DLDevice device) {
  switch (device.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
      return FERRY_MEM_HOST;
    case kDLCUDA:
      return FERRY_MEM_CUDA;
    case kDLCUDAManaged:
      return FERRY_MEM_CUDA_MANAGED;
    case kDLROCM:
      return FERRY_MEM_ROCM;
    default:
      return 0;
  }
}

namespace {

std::string KindNames(uint64_t kinds) {
  std::string out;
  auto add = [&](uint64_t bit, const char* name) {
    if ((kinds & bit) != 0) out += (out.empty() ? "" : "|") + std::string(name);
  };
  add(FERRY_MEM_HOST, "host");
  add(FERRY_MEM_CUDA, "CUDA");
  add(FERRY_MEM_ROCM, "ROCm");
  add(FERRY_MEM_CUDA_MANAGED, "CUDA managed");
  return out.empty() ? "none" : out;
}

Status NoHostRoute(const std::vector<Local>& mine,
                   const std::vector<wire::Endpoint>& theirs,
                   const std::string& peer_name) {
  std::string my_names, their_names;
  for (const auto& l : mine) my_names += (my_names.empty() ? "" : ",") + l.name;
  for (const auto& e : theirs) their_names += (their_names.empty() ? "" : ",") + e.plugin;
  return Status(FERRY_UNAVAILABLE,
                "no transport reaches worker '" + peer_name + "': this worker has [" +
                    my_names + "], it has [" + their_names +
                    "] (or the same plugin in another domain, e.g. shm on "
                    "another host); start both with a shared transport");
}

Status NoDeviceRoute(const std::vector<Local>& mine,
                     const std::vector<wire::Endpoint>& theirs, uint64_t needed) {
  std::string capable;
  for (const auto& l : mine) {
    if ((l.memory_kinds & needed) != needed) continue;
    std::string where = "not at the peer";
    for (const auto& e : theirs) {
      if (e.plugin != l.name) continue;
      where = "the peer's is in domain '" + e.domain + "', ours in '" + l.domain + "'";
    }
    capable += (capable.empty() ? "" : "; ") + l.name + ": " + where;
  }
  return Status(FERRY_UNAVAILABLE,
                "no transport that moves " + KindNames(needed & ~FERRY_MEM_HOST) +
                    " memory reaches it (" +
                    (capable.empty() ? "this worker has none loaded" : capable) + ")");
}

}  // namespace

StatusOr<wire::Endpoint> Choose(const std::vector<Local>& mine,
                                const std::vector<wire::Endpoint>& theirs,
                                uint64_t needed, const std::string& peer_name) {
  const bool device = NeedsDevice(needed);
  const wire::Endpoint* best = nullptr;
  const Local* best_local = nullptr;
  int64_t best_score = 0;
  for (const auto& l : mine) {
    if (device && (l.memory_kinds & needed) != needed) continue;
    for (const auto& e : theirs) {
      if (e.plugin != l.name || e.domain != l.domain) continue;
      if (!device) {
        // The host route, as it always was: our priority, ties to our
        // first transport.
        if (best == nullptr || l.priority > best_local->priority) {
          best = &e;
          best_local = &l;
        }
        continue;
      }
      const int64_t score = int64_t{l.priority} + e.priority;
      if (best == nullptr || score > best_score ||
          (score == best_score && l.name < best_local->name)) {
        best = &e;
        best_local = &l;
        best_score = score;
      }
    }
  }
  if (best == nullptr) {
    return device ? NoDeviceRoute(mine, theirs, needed)
                  : NoHostRoute(mine, theirs, peer_name);
  }
  return *best;
}

}  // namespace ferry::route
