#pragma once
// TLS settings of a connection that carries HMC's own protocol (the embedded store): both sides
// present a certificate and verify the other's against `ca`, TLS 1.2 or later.
#include <string>
#include <vector>

namespace hmc {

struct TlsOptions {
  std::string cert;              // PEM certificate (chain) of this process
  std::string key;               // PEM private key file, or
  std::string key_pem;           // the PEM private key itself
  std::string key_password;      // of an encrypted key; held in memory only, never logged
  std::vector<std::string> ca;   // PEM CA certificate files a peer's certificate must chain to
  std::vector<std::string> crl;  // PEM revocation lists of those CAs: a revoked peer is refused

  // Whether anything is set; a partial set is an InvalidConfigError where it is used.
  bool configured() const { return !cert.empty() || !key.empty() || !key_pem.empty() || !ca.empty() || !crl.empty(); }
};

}  // namespace hmc
