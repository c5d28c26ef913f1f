#include "address.h"

#include <cstdlib>
#include <cstring>

namespace ferry_fabric {
namespace {

constexpr const char kScheme[] = "fi://";
constexpr size_t kMaxNameBytes = 1024;

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Printable form of untrusted input for error messages.
std::string Printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s.substr(0, 200)) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += Format("\\x%02x", c);
    }
  }
  return out;
}

Status Bad(const std::string& text, const char* why) {
  return Error(FERRY_INVALID_ARGUMENT,
               "fabric: '%s' is not a fabric listener address (%s); a "
               "listener address looks like fi://<provider>/<hex endpoint "
               "name>/<listener id>, as listener_address() reports it",
               Printable(text).c_str(), why);
}

}  // namespace

std::string HexEncode(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

std::string ListenerAddress(const std::string& provider, const std::string& name,
                            uint64_t listener_id) {
  return PeerAddress(provider, name) + "/" +
         std::to_string(static_cast<unsigned long long>(listener_id));
}

std::string PeerAddress(const std::string& provider, const std::string& name) {
  return std::string(kScheme) + provider + "/" + HexEncode(name);
}

Status ParseListenerAddress(const char* text_in, const std::string& provider,
                            ParsedAddress* out) {
  const std::string text = text_in != nullptr ? text_in : "";
  if (text.compare(0, sizeof kScheme - 1, kScheme) != 0) {
    return Bad(text, "it does not start with fi://");
  }
  const size_t p0 = sizeof kScheme - 1;
  const size_t p1 = text.find('/', p0);
  const size_t p2 = p1 == std::string::npos ? p1 : text.find('/', p1 + 1);
  if (p1 == std::string::npos || p2 == std::string::npos || p1 == p0) {
    return Bad(text, "it lacks the provider, endpoint name or listener id");
  }
  out->provider = text.substr(p0, p1 - p0);
  const std::string hex = text.substr(p1 + 1, p2 - p1 - 1);
  const std::string id = text.substr(p2 + 1);
  if (hex.empty() || hex.size() % 2 != 0 || hex.size() / 2 > kMaxNameBytes) {
    return Bad(text, "the endpoint name is not an even number of hex digits");
  }
  out->name.clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = HexValue(hex[i]), lo = HexValue(hex[i + 1]);
    if (hi < 0 || lo < 0) return Bad(text, "the endpoint name is not hex");
    out->name += static_cast<char>((hi << 4) | lo);
  }
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos) {
    return Bad(text, "the listener id is not a number");
  }
  out->listener_id = std::strtoull(id.c_str(), nullptr, 10);
  if (out->provider != provider) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "fabric: cannot connect to %s: it is an address of libfabric "
                 "provider '%s', and this context uses provider '%s'. Both "
                 "sides must use the same provider: set "
                 "FERRY_FABRIC_PROVIDER=%s on both",
                 Printable(text).c_str(), Printable(out->provider).c_str(),
                 provider.c_str(), Printable(out->provider).c_str());
  }
  return Status();
}

}  // namespace ferry_fabric
