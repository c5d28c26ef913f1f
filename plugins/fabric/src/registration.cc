#include "registration.h"

#include "fi_error.h"

#include "ferry_plugin/log.h"

#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <sys/uio.h>

namespace ferry_fabric {
namespace {

fi_hmem_iface IfaceOf(ferry_device_t d) {
  switch (d.type) {
    case FERRY_DEVICE_CUDA:
    case FERRY_DEVICE_CUDA_MANAGED:
      return FI_HMEM_CUDA;
    case FERRY_DEVICE_ROCM:
      return FI_HMEM_ROCR;
    default:
      return FI_HMEM_SYSTEM;
  }
}

}  // namespace

Registrar::Registrar(fid_domain* domain, fid_ep* ep, uint64_t mr_mode, bool rma,
                     bool hmem, bool force_local, std::string provider)
    : domain_(domain),
      ep_(ep),
      mr_mode_(mr_mode),
      rma_(rma),
      hmem_(hmem),
      force_local_(force_local),
      local_((mr_mode & FI_MR_LOCAL) != 0 || force_local),
      virt_addr_((mr_mode & FI_MR_VIRT_ADDR) != 0),
      prov_key_((mr_mode & FI_MR_PROV_KEY) != 0),
      endpoint_bind_((mr_mode & FI_MR_ENDPOINT) != 0),
      hmem_mode_((mr_mode & FI_MR_HMEM) != 0),
      provider_(std::move(provider)) {}

std::string CudaRegistrationFailure(fid_domain* domain, const std::string& provider) {
  static char probe[64];
  iovec iov{probe, sizeof probe};
  fi_mr_attr attr{};
  attr.mr_iov = &iov;
  attr.iov_count = 1;
  attr.access = FI_RECV | FI_REMOTE_READ;
  attr.requested_key = ~uint64_t{0} >> 1;  // far above the Registrar's keys
  attr.iface = FI_HMEM_CUDA;
  attr.device.cuda = 0;
  fid_mr* mr = nullptr;
  const int rc = fi_mr_regattr(domain, &attr, 0, &mr);
  if (rc == 0) {
    fi_close(&mr->fid);
    return std::string();
  }
  if (rc != -FI_ENOSYS) return std::string();
  return "libfabric's provider " + provider + " cannot register CUDA memory (" +
         FiText("fi_mr_regattr(FI_HMEM_CUDA)", rc, provider) +
         "): a libfabric built without CUDA support, or no usable CUDA driver";
}

Status Registrar::Register(const void* data, uint64_t length, ferry_device_t device,
                           uint64_t access, fid_mr** out) {
  if (!IsHostMemory(device) && !hmem_) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "fabric: cannot register device memory (device type %d): "
                 "libfabric provider %s was opened without FI_HMEM",
                 device.type, provider_.c_str());
  }
  iovec iov{const_cast<void*>(data), static_cast<size_t>(length)};
  fi_mr_attr attr{};
  attr.mr_iov = &iov;
  attr.iov_count = 1;
  attr.access = access;
  attr.requested_key = prov_key_ ? 0 : next_key_++;
  attr.iface = IfaceOf(device);
  if (attr.iface == FI_HMEM_CUDA) attr.device.cuda = device.id;
  fid_mr* mr = nullptr;
  int rc = fi_mr_regattr(domain_, &attr, 0, &mr);
  if (rc != 0) {
    ferry_status_t code = rc == -FI_ENOMEM ? FERRY_RESOURCE_EXHAUSTED : FERRY_UNAVAILABLE;
    return Error(code, "fabric: registering %llu bytes at %p: %s",
                 static_cast<unsigned long long>(length), data,
                 FiText("fi_mr_regattr", rc, provider_).c_str());
  }
  if (endpoint_bind_) {
    rc = fi_mr_bind(mr, &ep_->fid, 0);
    if (rc == 0) rc = fi_mr_enable(mr);
    if (rc != 0) {
      fi_close(&mr->fid);
      return Error(FERRY_UNAVAILABLE,
                   "fabric: binding a registration to the endpoint "
                   "(FI_MR_ENDPOINT): %s",
                   FiText("fi_mr_bind/fi_mr_enable", rc, provider_).c_str());
    }
  }
  *out = mr;
  return Status();
}

void Registrar::Release(fid_mr* mr) {
  if (mr == nullptr) return;
  int rc = fi_close(&mr->fid);
  if (rc != 0) {
    FERRY_PLUGIN_LOG(FERRY_LOG_WARN, "releasing a registration: %s",
                     FiText("fi_close(mr)", rc, provider_).c_str());
  }
}

Status Registrar::RegisterHost(const ferry_reg_args_t& args, HostMr** out) {
  if (args.data == nullptr || args.length == 0) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "fabric: reg() needs a non-NULL buffer and a non-zero length");
  }
  uint32_t want =
      args.access != 0 ? args.access : (FERRY_ACCESS_SEND | FERRY_ACCESS_RECV);
  uint64_t access = 0;
  if (want & FERRY_ACCESS_SEND) {
    access |= FI_SEND;
    if (rma_) access |= FI_REMOTE_READ;  // peers read large segments
  }
  if (want & FERRY_ACCESS_RECV) {
    access |= FI_RECV;
    if (rma_) access |= FI_READ;  // the local side of an fi_read
  }
  ferry_device_t device{FERRY_DEVICE_CPU, 0};
  if (FERRY_FIELD_PRESENT(&args, ferry_reg_args_t, device)) device = args.device;
  fid_mr* mr = nullptr;
  Status st = Register(args.data, args.length, device, access, &mr);
  if (!st.ok()) return st;
  auto* h = new HostMr();
  h->mr = mr;
  h->base = static_cast<const char*>(args.data);
  h->length = args.length;
  h->device = device;
  h->desc = fi_mr_desc(mr);
  h->key = fi_mr_key(mr);
  h->access = access;
  *out = h;
  return Status();
}

void Registrar::ReleaseHost(HostMr* h) {
  if (h == nullptr) return;
  Release(h->mr);
  h->magic = 0;
  delete h;
}

}  // namespace ferry_fabric
