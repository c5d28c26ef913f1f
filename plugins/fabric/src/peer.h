// Remote endpoints this context talks to, one entry per distinct endpoint
// name, each inserted into the AV once and shared by every connection to it
// (64 connections to one peer are one AV entry and one provider-level
// connection).
#pragma once

#include "endpoint.h"
#include "local_endpoints.h"
#include "status.h"

#include <rdma/fabric.h>

#include <map>
#include <memory>
#include <string>

namespace ferry_fabric {

class Peer {
 public:
  fi_addr_t addr = FI_ADDR_UNSPEC;
  std::string name;       // binary endpoint name
  std::string printable;  // fi://<provider>/<hex>
  // Set when the peer is an endpoint of this very process (see
  // local_endpoints.h): false once that context is gone.
  LocalEndpoints::Token local;

  // True when sending to the peer must not even be tried.
  bool Unreachable() const { return local && !local->load(std::memory_order_acquire); }
};

class PeerTable {
 public:
  explicit PeerTable(Endpoint* endpoint) : endpoint_(endpoint) {}
  // The peer with endpoint name `name`, inserted into the AV on first use.
  Status Get(const std::string& name, Peer** out);

 private:
  Endpoint* endpoint_;
  std::map<std::string, std::unique_ptr<Peer>> peers_;
};

}  // namespace ferry_fabric
