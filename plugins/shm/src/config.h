// The context's settings: plugin parameters (the host's in-process settings,
// then FERRY_SHM_<KEY> from the environment), init flags, and the limits
// derived from them. Read once at init(); immutable afterwards.
#pragma once

#include "status.h"

#include <cstdint>
#include <string>

namespace ferry_shm {

struct Config {
  // Mode. busy_poll: progress() never arms the doorbell, the host spins and
  // the wakeup fd stays readable. Otherwise an empty progress() spins up to
  // spin_us polling the rings, then arms the doorbell (0: arm at once).
  bool busy_poll = false;
  uint32_t spin_us = 20;

  // Rings and data paths.
  uint64_t ring_size = 2ull << 20;       // per direction, power of two
  uint64_t chunk_size = 256ull << 10;    // ring-copy chunk (<= ring_size / 4)
  uint64_t inline_max = 16ull << 10;     // a segment this small goes inline
  uint64_t inline_budget = 64ull << 10;  // inline bytes per message
  // Cross-memory attach. `cma`: we may read a peer's memory (and so receive
  // large segments with one copy); false: every segment from and to us is
  // copied through the ring. `cma_send`: we send segments of cma_min to
  // cma_max bytes by CMA when the peer may read us. Parameter `cma`: 0, 1,
  // or auto (the default): as 1, except that a busy-poll context sends
  // through the ring, where both processes copy at once (README, "Data
  // paths": 3x faster than process_vm_readv here at 64 KiB - 1 MiB).
  bool cma = true;
  bool cma_send = true;
  uint64_t cma_min = 64ull << 10;  // segments this large use CMA...
  // ...up to this size (0: no bound). Larger ones are copied through the
  // ring, by both processes at once: on two cores that pipeline beat one
  // process's process_vm_readv from 1 MiB up (README, "Data paths").
  uint64_t cma_max = 1ull << 20;

  // Limits reported by query().
  uint32_t max_header_size = 64u << 10;
  uint32_t max_segments = 64;
  uint64_t max_message_size = 1ull << 40;

  // Set-up.
  std::string socket_dir;  // "" = $XDG_RUNTIME_DIR/ferry-shm or /tmp/ferry-shm-<uid>
  uint32_t connect_timeout_ms = 10000;  // bound on the set-up handshake
  std::string domain;                   // "host=...;ipc=...;user=..." or the override

  // Largest record a message can need in the ring (checked at init against
  // ring_size, so every legal message fits).
  uint64_t MaxMsgRecordBody() const;
};

// Reads the parameters through the host services; INVALID_ARGUMENT names a
// bad value and the variable that set it.
Status LoadConfig(uint32_t init_flags, Config* out);

// "host=<boot id>;ipc=<ipc namespace inode>;user=<uid>".
std::string LocalDomain();

}  // namespace ferry_shm
