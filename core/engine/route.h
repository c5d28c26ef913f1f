// Which transport carries a message to a peer: a pure function of this
// worker's transports, the peer's member record and the memory the message
// lives in, so that it can be tested without transports and so that both
// workers, computing it from the same records, agree.
//
// Host messages take the host route (the peer's one connection): the
// highest priority transport both workers have in one domain, as always.
// A message with a segment in device memory takes the device route: among
// the transports both have in one domain whose memory kinds include every
// kind the message needs, the highest sum of both sides' priorities (equal
// for one plugin; the sum is symmetric either way), ties to the smaller
// name. None: the message is staged through host memory (members.cc).
//
// The peer's record carries no memory kinds: a plugin of the same name is
// taken to move the same kinds on both sides.
#pragma once

#include "common/status.h"
#include "wire/messages.h"

#include <dlpack/dlpack.h>
#include <ferry/transport.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ferry::route {

// One of this worker's member transports, as routing sees it.
struct Local {
  std::string name;
  uint64_t memory_kinds = FERRY_MEM_HOST;  // FERRY_MEM_*
  int32_t priority = 0;
  std::string domain;
};

// The FERRY_MEM_* kind of memory on `device` (0 for a device ferry does not
// know).
uint64_t MemoryKindOf(DLDevice device);

// True when `kinds` asks for more than host memory.
inline bool NeedsDevice(uint64_t kinds) {
  return (kinds & ~FERRY_MEM_HOST) != 0;
}

// The endpoint of the peer (`peer_name`, `theirs`) that carries a message
// needing `needed` memory kinds. FERRY_UNAVAILABLE, with what each side has,
// when none does.
StatusOr<wire::Endpoint> Choose(const std::vector<Local>& mine,
                                const std::vector<wire::Endpoint>& theirs,
                                uint64_t needed, const std::string& peer_name);

}  // namespace ferry::route
