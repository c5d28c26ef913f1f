// The libfabric plumbing of the raw libfabric floor (raw_fabric_pingpong.h):
// one provider, one FI_EP_RDM endpoint with its fabric, domain, completion
// queue and address vector, memory registration that honours the provider's
// mr_mode, and a completion poll that spins (busy) or sleeps on the CQ's
// wait fd (sleep), like ferry's fabric plugin does in the same mode. It is
// written directly on libfabric, sharing no code with the plugin, so the
// floor measures the provider and nothing of ferry.
#pragma once

#include "common/status.h"
#include "transport/pingpong.h"

#include <rdma/fabric.h>
#include <rdma/fi_eq.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ferry::bench {

// What a registered buffer lends to local and remote operations.
struct RawFabricRegion {
  fid_mr* mr = nullptr;
  void* desc = nullptr;      // fi_mr_desc: passed with every local operation
  uint64_t key = 0;          // fi_mr_key: what the peer needs to write to it
  uint64_t remote_addr = 0;  // the buffer's address as the peer must name it
                             // (its virtual address under FI_MR_VIRT_ADDR,
                             // else 0: an offset into the region)
};

class RawFabricEndpoint {
 public:
  // Opens an RDM endpoint on `provider` ("" = libfabric's first choice).
  // With `want_rma`, it asks for FI_RMA writes carrying remote CQ data and
  // fails if the provider has neither; without, messages (FI_TAGGED) only.
  static StatusOr<std::unique_ptr<RawFabricEndpoint>> Open(const std::string& provider,
                                                           bool want_rma, PollMode mode);
  ~RawFabricEndpoint();
  RawFabricEndpoint(const RawFabricEndpoint&) = delete;
  RawFabricEndpoint& operator=(const RawFabricEndpoint&) = delete;

  fid_ep* ep() const { return ep_; }
  const std::string& provider() const { return provider_; }
  const std::string& name() const { return name_; }  // fi_getname bytes
  bool rma() const { return rma_; }
  size_t inject_size() const { return inject_size_; }

  StatusOr<fi_addr_t> InsertPeer(const std::string& name);

  // Registers [data, data+length) for every access the floor needs (send,
  // receive, RMA write from and into it). Released by the destructor.
  StatusOr<RawFabricRegion> Register(void* data, uint64_t length);

  // Reads up to `max` completions into `out`; when there are none, spins
  // (busy) or waits on the CQ (sleep) before returning 0. Completion errors
  // come back as a status with the provider's text.
  StatusOr<size_t> Poll(fi_cq_data_entry* out, size_t max);

  // A libfabric call's failure as a status naming the provider.
  Status Error(const char* call, ssize_t rc) const;

  LoopCounters counters() const { return counters_; }

 private:
  RawFabricEndpoint() = default;
  Status OpenResources(fi_info* info, PollMode mode);
  void Wait();

  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_av* av_ = nullptr;
  fid_ep* ep_ = nullptr;
  std::vector<fid_mr*> mrs_;
  std::string provider_;
  std::string name_;
  bool rma_ = false;
  size_t inject_size_ = 0;
  uint64_t mr_mode_ = 0;
  uint64_t next_key_ = 1;
  PollMode mode_ = PollMode::kBusy;
  int wait_fd_ = -1;     // the CQ's wait fd (sleep mode, when it has one)
  IdleBackoff backoff_;  // sleep mode without a wait fd
  LoopCounters counters_;
};

// The first RDM provider libfabric offers on this machine ("" if none).
std::string DefaultFabricProvider();

// Hex text of bytes and back (endpoint names travel in the READY line).
std::string ToHex(const std::string& bytes);
bool FromHex(const std::string& hex, std::string* bytes);

}  // namespace ferry::bench
