// The settings of one fabric context, read once at init from the host's
// plugin parameters (in-process settings, then FERRY_FABRIC_<KEY> in the
// environment). README.md lists every key; numbers out of range are clamped
// with a warning.
#pragma once

#include <cstdint>
#include <string>

namespace ferry_fabric {

enum class Tristate : uint8_t { kAuto, kOff, kOn };

struct Config {
  // Selection (provider.cc). Empty = libfabric's own first choice.
  std::string provider;     // "efa", "tcp;ofi_rxm", "shm", "verbs;ofi_rxm"
  std::string fabric_name;  // fi_fabric_attr::name, e.g. "127.0.0.1/32"
  std::string domain_name;  // fi_domain_attr::name, e.g. "lo", "rdmap0s31"
  // RMA reads for large segments: auto = when the provider offers FI_RMA;
  // off forces the chunked-message fallback (also a test switch).
  Tristate rma = Tristate::kAuto;
  // FI_HMEM (device memory): auto = ask for it only when a GPU driver is
  // present (asking changes which provider entries match).
  Tristate hmem = Tristate::kAuto;
  // Honour FI_MR_LOCAL even when the provider does not demand it: exercises
  // EFA's registration paths on any provider (tests, debugging).
  bool force_mr_local = false;

  bool busy_poll = false;
  bool inject = true;  // fi_inject for frames within inject_size

  uint32_t eager_size = 16 * 1024;      // receive buffer = largest eager frame
  uint32_t max_inline_size = 8 * 1024;  // per segment, when it fits the frame
  uint32_t max_header_size = 4096;
  uint32_t max_segments = 64;  // <= 64: CTS carries a 64-bit mask
  uint64_t max_message_size = uint64_t{1} << 40;
  uint32_t rx_buffers = 256;  // receive buffers: posted, or held by arrivals
  // Of those, how many are kept posted; the rest wait on a stack, the most
  // recently used on top (receive.cc: why few, and why a stack).
  uint32_t rx_posted = 32;
  uint32_t tx_buffers = 256;             // registered bounce buffers for sends
  uint64_t rma_chunk_size = 8u << 20;    // one fi_read moves at most this
  uint32_t max_pending_sends = 4096;     // queued per connection, then
                                         // FERRY_UNAVAILABLE
  uint64_t max_spill_bytes = 64u << 20;  // copies of held arrivals
  uint32_t connect_timeout_ms = 20000;
  uint32_t close_timeout_ms = 5000;
  int32_t priority = -1;        // -1: by provider (see context.cc)
  std::string domain_override;  // test-only: pretend to be elsewhere
  // test-only: hmem=auto's GPU driver check answers this instead of
  // looking for /dev/nvidiactl and /dev/kfd (auto: look).
  Tristate gpu_driver = Tristate::kAuto;
  // Mark libfabric's sockets and epoll fds close-on-exec (libfabric 1.17
  // opens them without FD_CLOEXEC): see fd_hygiene.h.
  bool cloexec_sweep = true;
};

// Reads every parameter through the host services (which may be NULL).
Config LoadConfig(uint32_t init_flags);

const char* TristateName(Tristate t);

}  // namespace ferry_fabric
