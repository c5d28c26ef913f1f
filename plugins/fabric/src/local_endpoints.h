// A process-wide registry of the endpoints this process's contexts own, with
// a liveness flag each.
//
// Why: libfabric 1.17's shm provider maps the region of a peer in the same
// process by pointer; once that peer's endpoint is closed, a send to it
// dereferences freed memory and crashes the process (seen with two contexts
// in one process, one of them fini()ed). Connections to an in-process peer
// therefore check its flag before every send or read and treat a closed peer
// as gone, which is also the truth. Peers in other processes are unaffected
// (their regions stay mapped here until the AV entry goes).
#pragma once

#include <atomic>
#include <memory>
#include <string>

namespace ferry_fabric {

class LocalEndpoints {
 public:
  using Token = std::shared_ptr<const std::atomic<bool>>;

  // Registers an endpoint of this process; the returned flag is cleared by
  // Unregister (call it before the endpoint is closed).
  static std::shared_ptr<std::atomic<bool>> Register(const std::string& provider,
                                                     const std::string& name);
  static void Unregister(const std::string& provider, const std::string& name,
                         const std::shared_ptr<std::atomic<bool>>& flag);
  // The flag of an endpoint of this process, or null for a remote one.
  static Token Find(const std::string& provider, const std::string& name);
};

}  // namespace ferry_fabric
