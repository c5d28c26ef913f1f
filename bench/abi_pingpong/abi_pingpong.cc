// ferry-bench-abi-pingpong: a deterministic ping-pong through a transport
// plugin's C ABI in ONE thread (abi_pair.h), for counting instructions
// (callgrind), not for timing.
//
// Usage: ferry-bench-abi-pingpong PLUGIN.so BUSY(0|1) ROUND_TRIPS [IDLE]
//   IDLE: extra progress() calls per side per round trip that find nothing
//   (the busy-poll spin). Count the difference between two runs, e.g.
//     valgrind --tool=callgrind ferry-bench-abi-pingpong libferry-tcp.so 1 2000
//     valgrind --tool=callgrind ferry-bench-abi-pingpong libferry-tcp.so 1 12000
//   and divide by 10000, so that set-up and tear-down cancel
//   (callgrind_annotate --inclusive=yes gives each entry point's share).
#include "abi_pingpong/abi_pair.h"

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s PLUGIN.so BUSY(0|1) ROUND_TRIPS [IDLE]\n", argv[0]);
    return 2;
  }
  const bool busy = std::atoi(argv[2]) != 0;
  const long round_trips = std::atol(argv[3]);
  const int idle = argc > 4 ? std::atoi(argv[4]) : 0;
  auto pair = ferry::bench::AbiPair::Open(argv[1], busy);
  pair->RoundTrips(round_trips, idle);
  std::printf("%ld round trips\n", round_trips);
  return 0;
}
