// TCP addresses as text: "127.0.0.1:5000", "[::1]:5000", "[fe80::1%eth0]:5",
// "localhost:5000". Only numeric hosts (and "localhost") are accepted:
// resolving a name may block for seconds, and listen()/connect() must not.
#pragma once

#include "status.h"

#include <sys/socket.h>

#include <string>

namespace ferry_tcp {

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;

  int family() const { return storage.ss_family; }
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
  sockaddr* get() { return reinterpret_cast<sockaddr*>(&storage); }
  uint16_t port() const;
  bool IsWildcard() const;  // 0.0.0.0 or ::
  // "1.2.3.4:5" or "[::1]:5".
  std::string ToString() const;
};

// Parses `text`. A missing port is 0 (the system picks one when listening).
Status ParseAddress(const std::string& text, SocketAddress* out);

// The address of `fd`'s local (peer=false) or remote end.
Status SocketName(int fd, bool peer, SocketAddress* out);

// What listener_address() reports for a listener bound to `bound`: the bound
// address itself, or for a wildcard, `advertise_host` when set, else the
// first non-loopback interface address of that family, else loopback.
std::string AdvertisedAddress(const SocketAddress& bound,
                              const std::string& advertise_host);

}  // namespace ferry_tcp
