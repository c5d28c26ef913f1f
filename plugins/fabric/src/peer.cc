#include "peer.h"

#include "address.h"
#include "fi_error.h"

#include <rdma/fi_domain.h>

namespace ferry_fabric {

Status PeerTable::Get(const std::string& name, Peer** out) {
  auto it = peers_.find(name);
  if (it != peers_.end()) {
    // An in-process peer that went away may have been succeeded by a new
    // endpoint with the same name (a reused port): look again. Without a
    // successor it stays unreachable: a null flag would make it read as a
    // remote peer, and a send to its unmapped shm region crashes.
    if (it->second->Unreachable()) {
      if (auto successor = LocalEndpoints::Find(endpoint_->provider(), name)) {
        it->second->local = std::move(successor);
      }
    }
    *out = it->second.get();
    return Status();
  }
  auto peer = std::make_unique<Peer>();
  peer->name = name;
  peer->printable = PeerAddress(endpoint_->provider(), name);
  int n = fi_av_insert(endpoint_->av(), name.data(), 1, &peer->addr, 0, nullptr);
  if (n != 1) {
    return Error(
        FERRY_INVALID_ARGUMENT, "fabric: cannot use peer address %s: %s",
        peer->printable.c_str(),
        FiText("fi_av_insert", n < 0 ? n : -FI_EINVAL, endpoint_->provider()).c_str());
  }
  peer->local = LocalEndpoints::Find(endpoint_->provider(), name);
  *out = peer.get();
  peers_.emplace(name, std::move(peer));
  return Status();
}

}  // namespace ferry_fabric
