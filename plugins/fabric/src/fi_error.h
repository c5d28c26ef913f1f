// Turning libfabric return codes and completion errors into text. Every
// libfabric failure the plugin reports names the call, the provider and
// fi_strerror's (or fi_cq_strerror's) words, so a user can search for it.
#pragma once

#include "status.h"

#include <rdma/fabric.h>
#include <rdma/fi_eq.h>

#include <string>

namespace ferry_fabric {

// "fi_av_insert failed on provider tcp;ofi_rxm: Connection refused (-111)".
std::string FiText(const char* call, int rc, const std::string& provider);

// A failing libfabric call as a Status with `code`.
Status FiError(ferry_status_t code, const char* call, int rc,
               const std::string& provider);

// The text of a completion error: fi_strerror(err) plus the provider's own
// explanation from fi_cq_strerror when it has one.
std::string CqErrorText(fid_cq* cq, const fi_cq_err_entry& entry,
                        const std::string& provider);

// Which ferry status a completion error means: connection-level failures
// (refused, reset, unreachable, I/O error on the wire) are PEER_GONE.
ferry_status_t StatusForCompletionError(int err);

}  // namespace ferry_fabric
