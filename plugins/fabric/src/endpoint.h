// The libfabric objects behind one context: fabric, domain, one completion
// queue for everything, one address vector and one reliable-datagram
// endpoint. Every connection of the context is multiplexed over this one
// endpoint (connection.h explains how), so the number of libfabric resources does
// not grow with the number of connections.
#pragma once

#include "provider.h"
#include "status.h"

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <string>

namespace ferry_fabric {

class Endpoint {
 public:
  Endpoint() = default;
  ~Endpoint();  // closes everything, endpoint first
  // Closes the endpoint alone (its posted operations are cancelled), so the
  // registrations they used can be released before the domain goes.
  void CloseEndpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  // Opens fabric, domain, CQ, AV and endpoint for `info` and enables the
  // endpoint. With `want_wait_fd` the CQ is opened with FI_WAIT_FD and
  // cq_wait_fd() is its fd; a provider without wait objects (shm) falls back
  // to FI_WAIT_NONE and cq_wait_fd() stays -1.
  Status Open(const fi_info* info, bool want_wait_fd);

  fid_fabric* fabric() const { return fabric_; }
  fid_domain* domain() const { return domain_; }
  fid_cq* cq() const { return cq_; }
  fid_av* av() const { return av_; }
  fid_ep* ep() const { return ep_; }
  int cq_wait_fd() const { return cq_wait_fd_; }
  // Why there is no wait fd (for the description), empty when there is one.
  const std::string& no_wait_reason() const { return no_wait_reason_; }
  // The endpoint's own address as fi_getname returns it (binary).
  const std::string& name() const { return name_; }
  const std::string& provider() const { return provider_; }

 private:
  Status OpenCq(const fi_info* info, bool want_wait_fd);

  std::string provider_;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_av* av_ = nullptr;
  fid_ep* ep_ = nullptr;
  int cq_wait_fd_ = -1;
  std::string no_wait_reason_;
  std::string name_;
};

}  // namespace ferry_fabric
