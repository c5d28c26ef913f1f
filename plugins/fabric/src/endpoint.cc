#include "endpoint.h"

#include "fi_error.h"

#include "ferry_plugin/log.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>

namespace ferry_fabric {
namespace {

void CloseFid(fid* f, const char* what, const std::string& provider) {
  if (f == nullptr) return;
  int rc = fi_close(f);
  if (rc != 0) {
    FERRY_PLUGIN_LOG(FERRY_LOG_WARN, "closing the %s: %s", what,
                     FiText("fi_close", rc, provider).c_str());
  }
}

}  // namespace

void Endpoint::CloseEndpoint() {
  CloseFid(ep_ ? &ep_->fid : nullptr, "endpoint", provider_);
  ep_ = nullptr;
}

Endpoint::~Endpoint() {
  // The endpoint goes first: CQ and AV refuse to close while bound.
  CloseEndpoint();
  CloseFid(av_ ? &av_->fid : nullptr, "address vector", provider_);
  CloseFid(cq_ ? &cq_->fid : nullptr, "completion queue", provider_);
  CloseFid(domain_ ? &domain_->fid : nullptr, "domain", provider_);
  CloseFid(fabric_ ? &fabric_->fid : nullptr, "fabric", provider_);
}

Status Endpoint::Open(const fi_info* info, bool want_wait_fd) {
  provider_ = info->fabric_attr->prov_name ? info->fabric_attr->prov_name : "?";
  int rc = fi_fabric(info->fabric_attr, &fabric_, nullptr);
  if (rc != 0) return FiError(FERRY_UNAVAILABLE, "fi_fabric", rc, provider_);
  rc = fi_domain(fabric_, const_cast<fi_info*>(info), &domain_, nullptr);
  if (rc != 0) return FiError(FERRY_UNAVAILABLE, "fi_domain", rc, provider_);
  Status st = OpenCq(info, want_wait_fd);
  if (!st.ok()) return st;

  fi_av_attr av_attr{};
  av_attr.type = info->domain_attr->av_type != FI_AV_UNSPEC ? info->domain_attr->av_type
                                                            : FI_AV_TABLE;
  av_attr.count = 64;  // a hint; the AV grows
  rc = fi_av_open(domain_, &av_attr, &av_, nullptr);
  if (rc != 0) return FiError(FERRY_UNAVAILABLE, "fi_av_open", rc, provider_);

  rc = fi_endpoint(domain_, const_cast<fi_info*>(info), &ep_, nullptr);
  if (rc != 0) return FiError(FERRY_UNAVAILABLE, "fi_endpoint", rc, provider_);
  rc = fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV);
  if (rc != 0) return FiError(FERRY_UNAVAILABLE, "fi_ep_bind(cq)", rc, provider_);
  rc = fi_ep_bind(ep_, &av_->fid, 0);
  if (rc != 0) return FiError(FERRY_UNAVAILABLE, "fi_ep_bind(av)", rc, provider_);
  rc = fi_enable(ep_);
  if (rc != 0) return FiError(FERRY_UNAVAILABLE, "fi_enable", rc, provider_);

  size_t len = 64;
  name_.assign(len, '\0');
  rc = fi_getname(&ep_->fid, name_.data(), &len);
  if (rc == -FI_ETOOSMALL) {
    name_.assign(len, '\0');
    rc = fi_getname(&ep_->fid, name_.data(), &len);
  }
  if (rc != 0) return FiError(FERRY_UNAVAILABLE, "fi_getname", rc, provider_);
  name_.resize(len);
  return Status();
}

Status Endpoint::OpenCq(const fi_info* info, bool want_wait_fd) {
  fi_cq_attr attr{};
  attr.format = FI_CQ_FORMAT_MSG;
  // Room for every operation the endpoint can have in flight.
  attr.size = info->tx_attr->size + info->rx_attr->size;
  attr.wait_obj = want_wait_fd ? FI_WAIT_FD : FI_WAIT_NONE;
  int rc = fi_cq_open(domain_, &attr, &cq_, nullptr);
  if (rc != 0 && want_wait_fd) {
    // shm (and EFA's RDM endpoints) have no CQ wait objects: the host then
    // polls this context with back-off.
    no_wait_reason_ = "the provider's CQ has no wait object (" +
                      FiText("fi_cq_open(FI_WAIT_FD)", rc, provider_) + ")";
    attr.wait_obj = FI_WAIT_NONE;
    rc = fi_cq_open(domain_, &attr, &cq_, nullptr);
  }
  if (rc != 0) return FiError(FERRY_UNAVAILABLE, "fi_cq_open", rc, provider_);
  if (attr.wait_obj != FI_WAIT_FD) {
    if (no_wait_reason_.empty()) no_wait_reason_ = "busy-poll mode";
    return Status();
  }
  int fd = -1;
  rc = fi_control(&cq_->fid, FI_GETWAIT, &fd);
  if (rc != 0 || fd < 0) {
    no_wait_reason_ = FiText("fi_control(FI_GETWAIT)", rc, provider_);
    return Status();
  }
  cq_wait_fd_ = fd;
  return Status();
}

}  // namespace ferry_fabric
