// Memory registration, honouring the provider's mr_mode:
//   FI_MR_LOCAL      buffers given to data transfers need a descriptor:
//                    bounce buffers are registered once, host-registered
//                    segments use their handle's, anything else is
//                    registered for that one operation;
//   FI_MR_PROV_KEY   keys come from the provider (fi_mr_key), otherwise the
//                    plugin requests keys unique within the domain;
//   FI_MR_VIRT_ADDR  remote addresses are virtual addresses, otherwise
//                    offsets into the registration;
//   FI_MR_ALLOCATED  only allocated memory is registered (all of ferry's is);
//   FI_MR_ENDPOINT   each registration is bound to the endpoint and enabled;
//   FI_MR_HMEM       device memory is always registered (with its iface).
//
// Why no registration cache keyed by address: freed and re-allocated memory
// would hit a stale entry (ABI rule). The host registers its buffer pools
// once through reg()/dereg() and passes the handles with its segments; other
// segments are registered per operation and released when it completes.
// Providers whose registrations are expensive (EFA, verbs) keep their own
// cache behind fi_mr_reg, invalidated by libfabric's memory monitor, which
// can do it safely; a second cache here could not.
#pragma once

#include "status.h"

#include <ferry/transport.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <cstdint>
#include <string>

namespace ferry_fabric {

// What a ferry_mr_t* handle points to (reg()/dereg()).
struct HostMr {
  static constexpr uint32_t kMagic = 0x31524d46;  // "FMR1"
  uint32_t magic = kMagic;
  fid_mr* mr = nullptr;
  const char* base = nullptr;
  uint64_t length = 0;
  ferry_device_t device{FERRY_DEVICE_CPU, 0};
  void* desc = nullptr;
  uint64_t key = 0;
  uint64_t access = 0;  // libfabric access bits it was registered with

  bool Covers(const void* p, uint64_t len) const {
    const char* c = static_cast<const char*>(p);
    return c >= base && len <= length && static_cast<uint64_t>(c - base) <= length - len;
  }
};

// Host memory (CPU, pinned CUDA host) as opposed to device memory.
inline bool IsHostMemory(ferry_device_t d) {
  return d.type == FERRY_DEVICE_CPU || d.type == FERRY_DEVICE_CUDA_HOST || d.type == 0;
}

// Empty when `domain` can register CUDA memory, else why not, in words for
// `ferry info`. libfabric checks that the CUDA interface is initialised (a
// libfabric built with CUDA support, a usable driver) before it looks at
// the buffer, and answers -FI_ENOSYS when it is not; so a small host buffer
// registered as CUDA memory is enough to ask (where CUDA works it fails
// otherwise, or not at all, and either means yes).
std::string CudaRegistrationFailure(fid_domain* domain, const std::string& provider);

class Registrar {
 public:
  Registrar(fid_domain* domain, fid_ep* ep, uint64_t mr_mode, bool rma, bool hmem,
            bool force_local, std::string provider);

  // Registers [data, data+length) with libfabric access bits. UNAVAILABLE /
  // RESOURCE_EXHAUSTED with fi_strerror's words on failure.
  Status Register(const void* data, uint64_t length, ferry_device_t device,
                  uint64_t access, fid_mr** out);
  // Closes a registration (logged on failure; nothing else to do).
  void Release(fid_mr* mr);

  // A host reg(): access from FERRY_ACCESS_* bits.
  Status RegisterHost(const ferry_reg_args_t& args, HostMr** out);
  void ReleaseHost(HostMr* mr);

  // Data transfers on this buffer need a local descriptor.
  bool NeedsLocalDesc(ferry_device_t device) const {
    return local_ || (!IsHostMemory(device) && hmem_mode_);
  }
  // The address a peer names in fi_read for `p` inside a registration
  // starting at `base`.
  uint64_t RemoteAddr(const void* p, const void* base) const {
    return virt_addr_ ? reinterpret_cast<uint64_t>(p)
                      : static_cast<uint64_t>(static_cast<const char*>(p) -
                                              static_cast<const char*>(base));
  }

  uint64_t mr_mode() const { return mr_mode_; }
  bool force_local() const { return force_local_ && !(mr_mode_ & FI_MR_LOCAL); }

 private:
  fid_domain* domain_;
  fid_ep* ep_;
  uint64_t mr_mode_;
  bool rma_;
  bool hmem_;
  bool force_local_;
  bool local_;
  bool virt_addr_;
  bool prov_key_;
  bool endpoint_bind_;
  bool hmem_mode_;
  std::string provider_;
  uint64_t next_key_ = 1;  // requested keys when the provider does not pick
};

// A registration owned by one operation: released with it.
class OpRegistration {
 public:
  OpRegistration() = default;
  OpRegistration(Registrar* r, fid_mr* mr) : registrar_(r), mr_(mr) {}
  OpRegistration(OpRegistration&& o) noexcept : registrar_(o.registrar_), mr_(o.mr_) {
    o.mr_ = nullptr;
  }
  OpRegistration& operator=(OpRegistration&& o) noexcept {
    if (this != &o) {
      Reset();
      registrar_ = o.registrar_;
      mr_ = o.mr_;
      o.mr_ = nullptr;
    }
    return *this;
  }
  ~OpRegistration() { Reset(); }
  void Reset() {
    if (mr_ != nullptr) registrar_->Release(mr_);
    mr_ = nullptr;
  }
  fid_mr* mr() const { return mr_; }

 private:
  Registrar* registrar_ = nullptr;
  fid_mr* mr_ = nullptr;
};

}  // namespace ferry_fabric
