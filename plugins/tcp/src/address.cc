#include "address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>

#include <cstring>

namespace ferry_tcp {
namespace {

// Splits "host:port" / "[host]:port" / "host" / "[host]".
Status SplitHostPort(const std::string& text, std::string* host, std::string* port) {
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos) {
      return Error(FERRY_INVALID_ARGUMENT, "tcp: address '%s' has '[' without ']'",
                   text.c_str());
    }
    *host = text.substr(1, close - 1);
    std::string rest = text.substr(close + 1);
    if (rest.empty()) return Status();
    if (rest[0] != ':') {
      return Error(FERRY_INVALID_ARGUMENT,
                   "tcp: address '%s': expected ':port' after ']'", text.c_str());
    }
    *port = rest.substr(1);
    return Status();
  }
  size_t colon = text.find(':');
  if (colon == std::string::npos) {
    *host = text;
    return Status();
  }
  if (text.find(':', colon + 1) != std::string::npos) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "tcp: address '%s': write IPv6 addresses in brackets, "
                 "e.g. [::1]:5000",
                 text.c_str());
  }
  *host = text.substr(0, colon);
  *port = text.substr(colon + 1);
  return Status();
}

Status ParsePort(const std::string& text, const std::string& port, uint16_t* out) {
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoul(port) > 65535) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "tcp: address '%s': port '%s' is not a number in 0..65535", text.c_str(),
                 port.c_str());
  }
  *out = static_cast<uint16_t>(std::stoul(port));
  return Status();
}

void SetPort(SocketAddress* a, uint16_t port) {
  if (a->family() == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&a->storage)->sin_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in6*>(&a->storage)->sin6_port = htons(port);
  }
}

std::string JoinHostPort(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos) {
    return Format("[%s]:%u", host.c_str(), port);
  }
  return Format("%s:%u", host.c_str(), port);
}

}  // namespace

uint16_t SocketAddress::port() const {
  if (family() == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  }
  if (family() == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  }
  return 0;
}

bool SocketAddress::IsWildcard() const {
  if (family() == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr.s_addr ==
           htonl(INADDR_ANY);
  }
  if (family() == AF_INET6) {
    const auto* a6 = reinterpret_cast<const sockaddr_in6*>(&storage);
    return IN6_IS_ADDR_UNSPECIFIED(&a6->sin6_addr);
  }
  return false;
}

std::string SocketAddress::ToString() const {
  char host[NI_MAXHOST];
  if (getnameinfo(get(), length, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) {
    return "<unknown address>";
  }
  return JoinHostPort(host, port());
}

Status ParseAddress(const std::string& text, SocketAddress* out) {
  std::string host, port_text;
  Status st = SplitHostPort(text, &host, &port_text);
  if (!st.ok()) return st;
  uint16_t port = 0;
  if (!port_text.empty()) {
    st = ParsePort(text, port_text, &port);
    if (!st.ok()) return st;
  }
  if (host == "localhost") host = "127.0.0.1";
  if (host == "*") host = "0.0.0.0";
  if (host.empty()) {
    return Error(FERRY_INVALID_ARGUMENT, "tcp: address '%s' has no host", text.c_str());
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST;  // never a DNS lookup: it could block
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "tcp: address '%s': '%s' is not a numeric IPv4/IPv6 address "
                 "(%s); host names are not resolved because that could "
                 "block: resolve it first or use an IP address",
                 text.c_str(), host.c_str(), gai_strerror(rc));
  }
  std::memcpy(&out->storage, res->ai_addr, res->ai_addrlen);
  out->length = res->ai_addrlen;
  freeaddrinfo(res);
  SetPort(out, port);
  return Status();
}

Status SocketName(int fd, bool peer, SocketAddress* out) {
  out->length = sizeof out->storage;
  int rc = peer ? getpeername(fd, out->get(), &out->length)
                : getsockname(fd, out->get(), &out->length);
  if (rc != 0) {
    return Error(FERRY_INTERNAL, "tcp: %s failed: %s",
                 peer ? "getpeername" : "getsockname", std::strerror(errno));
  }
  return Status();
}

std::string AdvertisedAddress(const SocketAddress& bound,
                              const std::string& advertise_host) {
  if (!bound.IsWildcard()) return bound.ToString();
  if (!advertise_host.empty()) {
    return JoinHostPort(advertise_host, bound.port());
  }
  std::string found;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* it = list; it != nullptr && found.empty(); it = it->ifa_next) {
      if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != bound.family() ||
          (it->ifa_flags & IFF_UP) == 0 || (it->ifa_flags & IFF_LOOPBACK) != 0) {
        continue;
      }
      if (bound.family() == AF_INET6) {
        const auto* a6 = reinterpret_cast<const sockaddr_in6*>(it->ifa_addr);
        // A link-local address needs a scope id the peer does not know.
        if (IN6_IS_ADDR_LINKLOCAL(&a6->sin6_addr)) continue;
      }
      SocketAddress a;
      a.length = bound.family() == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
      std::memcpy(&a.storage, it->ifa_addr, a.length);
      SetPort(&a, bound.port());
      found = a.ToString();
    }
    freeifaddrs(list);
  }
  if (!found.empty()) return found;
  return JoinHostPort(bound.family() == AF_INET6 ? "::1" : "127.0.0.1", bound.port());
}

}  // namespace ferry_tcp
