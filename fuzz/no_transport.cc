// The fuzzers link a few of the core's files, not the whole core: the
// receive buffers' device-memory path (engine/device_memory.cc) refers to
// the transport's memory calls, which no fuzz target reaches (nothing here
// allocates device memory). These definitions stand in for
// core/transport/transport.cc so the plugin loader stays out of the link;
// reaching one is a bug in a fuzz target.
#include "transport/transport.h"

#include <cstdio>
#include <cstdlib>

namespace ferry {
namespace {

[[noreturn]] void Unreachable(const char* what) {
  std::fprintf(stderr, "fuzz: %s called, but the fuzzers load no transport\n", what);
  std::abort();
}

}  // namespace

StatusOr<void*> Transport::MemAlloc(ferry_device_t, uint64_t) {
  Unreachable("Transport::MemAlloc");
}
void Transport::MemFree(ferry_device_t, void*) {
  Unreachable("Transport::MemFree");
}
Status Transport::MemCopy(void*, ferry_device_t, const void*, ferry_device_t, uint64_t,
                          uint64_t) {
  Unreachable("Transport::MemCopy");
}

}  // namespace ferry
