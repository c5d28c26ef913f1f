// HMAC proofs for the connection handshake (auth.h), on OpenSSL.
#include "engine/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <stdexcept>
#include <vector>

namespace ferry::auth {
namespace {

Mac Hmac(const std::string& key, const std::vector<uint8_t>& data) {
  Mac out{};
  size_t len = 0;
  // An empty key is allowed (a job without a secret; the worker warns).
  static const unsigned char kEmpty = 0;
  const unsigned char* k =
      key.empty() ? &kEmpty : reinterpret_cast<const unsigned char*>(key.data());
  if (EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA256", nullptr, k, key.size(), data.data(),
                data.size(), out.data(), out.size(), &len) == nullptr ||
      len != out.size()) {
    // Only a broken OpenSSL installation gets here; a zero MAC then fails
    // every comparison, so nothing is authenticated by accident.
    out.fill(0);
  }
  return out;
}

std::vector<uint8_t> Transcript(const char* label, const std::string& job, const Nonce& a,
                                const Nonce& b, uint64_t id) {
  std::vector<uint8_t> data;
  wire::Writer w(&data);
  w.Str(label);
  w.Str(job);
  w.Raw(a.data(), a.size());
  w.Raw(b.data(), b.size());
  w.U64(id);
  return data;
}

}  // namespace

Nonce RandomNonce() {
  Nonce n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) {
    throw std::runtime_error("OpenSSL RAND_bytes failed: no entropy source");
  }
  return n;
}

Mac AcceptorProof(const std::string& secret, const std::string& job,
                  const Nonce& connector_nonce, const Nonce& acceptor_nonce,
                  uint64_t acceptor_id) {
  return Hmac(secret, Transcript("ferry acceptor v1", job, connector_nonce,
                                 acceptor_nonce, acceptor_id));
}

Mac ConnectorProof(const std::string& secret, const std::string& job,
                   const Nonce& acceptor_nonce, const Nonce& connector_nonce,
                   uint64_t connector_id) {
  return Hmac(secret, Transcript("ferry connector v1", job, acceptor_nonce,
                                 connector_nonce, connector_id));
}

bool Equal(const Mac& a, const Mac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace ferry::auth
