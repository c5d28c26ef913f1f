// Connection authentication: HMAC-SHA256 over both sides' nonces with the
// job secret as key (OpenSSL). Each side proves it holds the secret without
// sending it; the nonces make a recorded exchange useless for a replay.
#pragma once

#include "wire/messages.h"

#include <array>
#include <string>

namespace ferry::auth {

using Nonce = std::array<uint8_t, wire::kNonceSize>;
using Mac = std::array<uint8_t, wire::kMacSize>;

Nonce RandomNonce();

// The acceptor's proof (in CHALLENGE) and the connector's (in AUTH). The
// labels differ so that one side's proof can never be replayed as the
// other's.
Mac AcceptorProof(const std::string& secret, const std::string& job,
                  const Nonce& connector_nonce, const Nonce& acceptor_nonce,
                  uint64_t acceptor_id);
Mac ConnectorProof(const std::string& secret, const std::string& job,
                   const Nonce& acceptor_nonce, const Nonce& connector_nonce,
                   uint64_t connector_id);

// Constant-time comparison.
bool Equal(const Mac& a, const Mac& b);

}  // namespace ferry::auth
