#include "fi_error.h"

#include <rdma/fi_errno.h>

#include <cstdlib>

namespace ferry_fabric {

std::string FiText(const char* call, int rc, const std::string& provider) {
  int e = std::abs(rc);
  return Format("%s failed on libfabric provider %s: %s (%d)", call,
                provider.empty() ? "?" : provider.c_str(), fi_strerror(e), rc);
}

Status FiError(ferry_status_t code, const char* call, int rc,
               const std::string& provider) {
  return Status(code, "fabric: " + FiText(call, rc, provider));
}

std::string CqErrorText(fid_cq* cq, const fi_cq_err_entry& entry,
                        const std::string& provider) {
  std::string text = Format("%s (%d)", fi_strerror(entry.err), entry.err);
  if (cq != nullptr && entry.prov_errno != 0) {
    char buf[256] = {0};
    const char* detail =
        fi_cq_strerror(cq, entry.prov_errno, entry.err_data, buf, sizeof buf);
    if (detail != nullptr && detail[0] != '\0') {
      text += Format("; provider says: %s (prov_errno %d)", detail, entry.prov_errno);
    }
  }
  return text + " [provider " + provider + "]";
}

ferry_status_t StatusForCompletionError(int err) {
  switch (err) {
    case FI_ECANCELED:
      return FERRY_CANCELLED;
    case FI_ETRUNC:
    case FI_EMSGSIZE:
      return FERRY_DATA_LOSS;
    case FI_EACCES:
    case FI_EPERM:
    case FI_EKEYREJECTED:
      return FERRY_PERMISSION_DENIED;
    default:
      // ECONNREFUSED, ECONNRESET, ECONNABORTED, EHOSTUNREACH, ENOTCONN,
      // EIO, EADDRNOTAVAIL, EREMOTEIO ...: the peer (or the path to it) is
      // gone as far as this connection is concerned.
      return FERRY_PEER_GONE;
  }
}

}  // namespace ferry_fabric
