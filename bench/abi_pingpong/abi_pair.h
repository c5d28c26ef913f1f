// Two contexts of one transport plugin in this process, a client and a
// server connected over loopback, driven through the plugin's C ABI alone
// (no ferry::Transport, no host loop) in ONE thread: what runs under the
// plugin's entry points is the plugin's own work. Each round trip has the
// transport benchmark's message shape: a 16-byte header and one 64-byte
// segment, the inline arrival copied out and discard()ed, the round trip
// ending when the echo is in and its SEND_DONE seen.
//
// Used by ferry-bench-abi-pingpong (instruction counts under callgrind) and
// ferry-bench-fabric-cpu (the plugin's time per round trip beside
// libfabric's own, in the same thread).
#pragma once

#include <ferry/transport.h>

#include <cstdint>
#include <memory>
#include <string>

namespace ferry::bench {

class AbiPair {
 public:
  // Loads `plugin_path`, opens both contexts (busy-poll or not) and connects
  // them. Plugin parameters come from the environment (FERRY_<PLUGIN>_<KEY>),
  // as the core's host services would read them. Exits with a message on
  // any failure: this is a benchmark's set-up, not a library.
  static std::unique_ptr<AbiPair> Open(const std::string& plugin_path, bool busy);
  ~AbiPair();
  AbiPair(const AbiPair&) = delete;
  AbiPair& operator=(const AbiPair&) = delete;

  // `n` round trips; after each, `idle` progress() calls per side that find
  // nothing (the busy-poll spin). Sleeping-mode contexts are never put to
  // sleep (one thread drives both): poll() on the wakeup fd is called with a
  // zero timeout so that its cost is counted.
  void RoundTrips(long n, int idle);

 private:
  struct Side;
  AbiPair();
  void Poll(Side& s);
  void Send(Side& s, const char* data);
  void Consume(Side& s);

  const ferry_transport_vtable_t* vt_ = nullptr;
  std::unique_ptr<Side> client_, server_;
  ferry_listener_t* listener_ = nullptr;
  char send_buf_[64] = {};
  char recv_buf_[64] = {};
};

}  // namespace ferry::bench
