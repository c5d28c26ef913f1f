// Listener addresses as printable strings:
//
//   fi://<provider>/<endpoint name in hex>/<listener id>
//   e.g. fi://tcp;ofi_rxm/02009a4ac0000202.../1
//
// The endpoint name is fi_getname()'s binary address of the context's one
// RDM endpoint; the listener id tells listeners of one context apart (they
// share the endpoint). The provider is part of the address so that
// connecting with a context on another provider fails at once with a message
// that says which provider to use, instead of inserting a foreign address
// into the AV.
#pragma once

#include "status.h"

#include <cstdint>
#include <string>

namespace ferry_fabric {

struct ParsedAddress {
  std::string provider;
  std::string name;  // binary endpoint name
  uint64_t listener_id = 0;
};

std::string HexEncode(const std::string& bytes);

// "fi://<provider>/<hex>/<listener_id>".
std::string ListenerAddress(const std::string& provider, const std::string& name,
                            uint64_t listener_id);
// "fi://<provider>/<hex>": the peer of a connection.
std::string PeerAddress(const std::string& provider, const std::string& name);

// Parses a listener address. INVALID_ARGUMENT (with what is wrong and what
// an address looks like) for anything else, including an address of another
// provider than `provider`.
Status ParseListenerAddress(const char* text, const std::string& provider,
                            ParsedAddress* out);

}  // namespace ferry_fabric
