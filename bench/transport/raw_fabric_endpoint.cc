#include "transport/raw_fabric_endpoint.h"

#include <poll.h>
#include <time.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstring>

namespace ferry::bench {
namespace {

// The mr_mode bits the floor honours: descriptors with every operation
// (FI_MR_LOCAL), remote addresses as virtual addresses or offsets
// (FI_MR_VIRT_ADDR), only mmap()ed buffers are registered (FI_MR_ALLOCATED),
// keys read back with fi_mr_key (FI_MR_PROV_KEY), regions bound to the
// endpoint (FI_MR_ENDPOINT). The same set as ferry's fabric plugin, so both
// get the same provider entry.
constexpr uint64_t kHonouredMrMode =
    FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;

uint32_t ApiVersion() {
  return std::min<uint32_t>(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), fi_version());
}

fi_info* MakeHints(const std::string& provider, bool rma) {
  fi_info* hints = fi_allocinfo();
  if (hints == nullptr) return nullptr;
  hints->caps = FI_MSG | FI_TAGGED;
  if (rma) hints->caps |= FI_RMA | FI_WRITE | FI_REMOTE_WRITE;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode = static_cast<int>(kHonouredMrMode);
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  hints->domain_attr->resource_mgmt = FI_RM_ENABLED;
  if (!provider.empty()) {
    hints->fabric_attr->prov_name = strdup(provider.c_str());
  }
  return hints;
}

}  // namespace

std::string DefaultFabricProvider() {
  fi_info* hints = MakeHints("", /*rma=*/false);
  if (hints == nullptr) return "";
  fi_info* list = nullptr;
  std::string name;
  if (fi_getinfo(ApiVersion(), nullptr, nullptr, 0, hints, &list) == 0 &&
      list != nullptr && list->fabric_attr->prov_name != nullptr) {
    name = list->fabric_attr->prov_name;
  }
  if (list != nullptr) fi_freeinfo(list);
  fi_freeinfo(hints);
  return name;
}

std::string ToHex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

bool FromHex(const std::string& hex, std::string* bytes) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (hex.size() % 2 != 0) return false;
  bytes->clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    bytes->push_back(static_cast<char>(hi * 16 + lo));
  }
  return true;
}

Status RawFabricEndpoint::Error(const char* call, ssize_t rc) const {
  const int e = static_cast<int>(rc < 0 ? -rc : rc);
  return Status(FERRY_UNKNOWN, "raw fabric (" + provider_ + "): " + call + ": " +
                                   fi_strerror(e) + " (" + std::to_string(-e) + ")");
}

StatusOr<std::unique_ptr<RawFabricEndpoint>> RawFabricEndpoint::Open(
    const std::string& provider, bool want_rma, PollMode mode) {
  std::unique_ptr<RawFabricEndpoint> e(new RawFabricEndpoint());
  e->provider_ = provider.empty() ? "(libfabric's choice)" : provider;
  fi_info* hints = MakeHints(provider, want_rma);
  if (hints == nullptr) {
    return Status(FERRY_RESOURCE_EXHAUSTED, "raw fabric: fi_allocinfo failed");
  }
  fi_info* list = nullptr;
  const int rc = fi_getinfo(ApiVersion(), nullptr, nullptr, 0, hints, &list);
  fi_freeinfo(hints);
  if (rc != 0 || list == nullptr) {
    return Status(
        FERRY_UNAVAILABLE,
        "raw fabric: provider '" + e->provider_ + "' offers no RDM endpoint with " +
            (want_rma ? "FI_RMA writes and tagged messages" : "tagged messages") +
            " here: fi_getinfo: " + fi_strerror(-rc) +
            (want_rma ? " (--raw-fabric-path msg avoids RMA)" : ""));
  }
  // The first (preferred) entry only.
  if (list->next != nullptr) {
    fi_freeinfo(list->next);
    list->next = nullptr;
  }
  e->info_ = list;
  e->provider_ = list->fabric_attr->prov_name;
  if (want_rma && list->domain_attr->cq_data_size == 0) {
    return Status(FERRY_UNAVAILABLE,
                  "raw fabric: provider '" + e->provider_ +
                      "' carries no remote CQ data, which the RMA path "
                      "needs to tell the target a write landed "
                      "(--raw-fabric-path msg avoids RMA)");
  }
  e->rma_ = want_rma;
  e->inject_size_ = list->tx_attr->inject_size;
  e->mr_mode_ = static_cast<uint64_t>(list->domain_attr->mr_mode);
  Status st = e->OpenResources(list, mode);
  if (!st.ok()) return st;
  return e;
}

Status RawFabricEndpoint::OpenResources(fi_info* info, PollMode mode) {
  mode_ = mode;
  int rc = fi_fabric(info->fabric_attr, &fabric_, nullptr);
  if (rc != 0) return Error("fi_fabric", rc);
  rc = fi_domain(fabric_, info, &domain_, nullptr);
  if (rc != 0) return Error("fi_domain", rc);

  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_DATA;
  cq_attr.size = info->tx_attr->size + info->rx_attr->size;
  cq_attr.wait_obj = mode == PollMode::kSleep ? FI_WAIT_FD : FI_WAIT_NONE;
  rc = fi_cq_open(domain_, &cq_attr, &cq_, nullptr);
  if (rc != 0 && cq_attr.wait_obj == FI_WAIT_FD) {
    // shm has no CQ wait object: sleep mode then backs off, as ferry does.
    cq_attr.wait_obj = FI_WAIT_NONE;
    rc = fi_cq_open(domain_, &cq_attr, &cq_, nullptr);
  }
  if (rc != 0) return Error("fi_cq_open", rc);
  if (cq_attr.wait_obj == FI_WAIT_FD &&
      fi_control(&cq_->fid, FI_GETWAIT, &wait_fd_) != 0) {
    wait_fd_ = -1;
  }

  fi_av_attr av_attr{};
  av_attr.type = info->domain_attr->av_type != FI_AV_UNSPEC ? info->domain_attr->av_type
                                                            : FI_AV_TABLE;
  rc = fi_av_open(domain_, &av_attr, &av_, nullptr);
  if (rc != 0) return Error("fi_av_open", rc);
  rc = fi_endpoint(domain_, info, &ep_, nullptr);
  if (rc != 0) return Error("fi_endpoint", rc);
  rc = fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV);
  if (rc != 0) return Error("fi_ep_bind(cq)", rc);
  rc = fi_ep_bind(ep_, &av_->fid, 0);
  if (rc != 0) return Error("fi_ep_bind(av)", rc);
  rc = fi_enable(ep_);
  if (rc != 0) return Error("fi_enable", rc);

  size_t len = 0;
  rc = fi_getname(&ep_->fid, nullptr, &len);
  name_.assign(len, '\0');
  rc = fi_getname(&ep_->fid, name_.data(), &len);
  if (rc != 0) return Error("fi_getname", rc);
  name_.resize(len);
  return Status();
}

RawFabricEndpoint::~RawFabricEndpoint() {
  // Regions and the endpoint before the CQ, AV and domain they are bound to.
  for (fid_mr* mr : mrs_) fi_close(&mr->fid);
  if (ep_ != nullptr) fi_close(&ep_->fid);
  if (av_ != nullptr) fi_close(&av_->fid);
  if (cq_ != nullptr) fi_close(&cq_->fid);
  if (domain_ != nullptr) fi_close(&domain_->fid);
  if (fabric_ != nullptr) fi_close(&fabric_->fid);
  if (info_ != nullptr) fi_freeinfo(info_);
}

StatusOr<fi_addr_t> RawFabricEndpoint::InsertPeer(const std::string& name) {
  fi_addr_t addr = FI_ADDR_UNSPEC;
  const int n = fi_av_insert(av_, name.data(), 1, &addr, 0, nullptr);
  if (n != 1) return Error("fi_av_insert", n < 0 ? n : -FI_EINVAL);
  return addr;
}

StatusOr<RawFabricRegion> RawFabricEndpoint::Register(void* data, uint64_t length) {
  RawFabricRegion r;
  const uint64_t access = FI_SEND | FI_RECV | FI_WRITE | FI_REMOTE_WRITE;
  // Without FI_MR_PROV_KEY the key is ours to choose; unique per region.
  const uint64_t requested_key = next_key_++;
  int rc = fi_mr_reg(domain_, data, length, access, 0, requested_key, 0, &r.mr, nullptr);
  if (rc != 0) return Error("fi_mr_reg", rc);
  mrs_.push_back(r.mr);
  if (mr_mode_ & FI_MR_ENDPOINT) {
    rc = fi_mr_bind(r.mr, &ep_->fid, 0);
    if (rc == 0) rc = fi_mr_enable(r.mr);
    if (rc != 0) return Error("fi_mr_bind/fi_mr_enable", rc);
  }
  r.desc = fi_mr_desc(r.mr);
  r.key = fi_mr_key(r.mr);
  if (r.key == FI_KEY_NOTAVAIL) {
    return Error("fi_mr_key (raw keys are not supported)", -FI_ENOSYS);
  }
  r.remote_addr = (mr_mode_ & FI_MR_VIRT_ADDR) ? reinterpret_cast<uint64_t>(data) : 0;
  return r;
}

StatusOr<size_t> RawFabricEndpoint::Poll(fi_cq_data_entry* out, size_t max) {
  ++counters_.calls;
  const ssize_t n = fi_cq_read(cq_, out, max);
  if (n > 0) {
    backoff_.Reset();
    return static_cast<size_t>(n);
  }
  if (n == -FI_EAVAIL) {
    fi_cq_err_entry err{};
    fi_cq_readerr(cq_, &err, 0);
    const char* text = fi_cq_strerror(cq_, err.prov_errno, err.err_data, nullptr, 0);
    return Status(
        err.err == FI_ECONNREFUSED || err.err == FI_ENOTCONN || err.err == FI_ECONNRESET
            ? FERRY_PEER_GONE
            : FERRY_UNKNOWN,
        "raw fabric (" + provider_ + "): completion error: " + fi_strerror(err.err) +
            " (" + (text ? text : "") + ")");
  }
  if (n != -FI_EAGAIN) return Error("fi_cq_read", n);
  if (mode_ == PollMode::kSleep) Wait();
  return size_t{0};
}

void RawFabricEndpoint::Wait() {
  if (wait_fd_ >= 0) {
    // The fd may only be slept on once fi_trywait says nothing is pending;
    // otherwise the next fi_cq_read has work and must run first.
    fid* f = &cq_->fid;
    if (fi_trywait(fabric_, &f, 1) != FI_SUCCESS) return;
    ++counters_.waits;
    pollfd p{wait_fd_, POLLIN, 0};
    (void)poll(&p, 1, 1000);  // the timeout only bounds a lost wake-up
    return;
  }
  backoff_.Wait(&counters_);  // no wait object
}

}  // namespace ferry::bench
