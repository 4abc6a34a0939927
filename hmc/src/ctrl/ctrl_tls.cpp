#include "ctrl/ctrl_tls.hpp"

#include <openssl/ssl.h>

#include "hmc/error.hpp"

namespace hmc::detail {

namespace ssl = boost::asio::ssl;

std::unique_ptr<ssl::context> make_tls_context(const CtrlOptions& o) {
  const int given = !o.tls_cert.empty() + !o.tls_key.empty() + !o.tls_ca.empty();
  if (given == 0) return nullptr;
  if (given != 3)
    throw InvalidConfigError(
        "TLS needs all of tls_cert, tls_key and tls_ca (HMC_TLS_CERT, HMC_TLS_KEY, HMC_TLS_CA); missing " +
        std::string(o.tls_cert.empty() ? "tls_cert " : "") + (o.tls_key.empty() ? "tls_key " : "") +
        (o.tls_ca.empty() ? "tls_ca" : ""));
  auto ctx = std::make_unique<ssl::context>(ssl::context::tls);
  boost::system::error_code ec;
  auto check = [&](const char* what, const std::string& file) {
    if (ec) throw InvalidConfigError("TLS: cannot load " + std::string(what) + " " + file + ": " + ec.message());
  };
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                       ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1,
                   ec);
  ctx->use_certificate_chain_file(o.tls_cert, ec);
  check("certificate", o.tls_cert);
  ctx->use_private_key_file(o.tls_key, ssl::context::pem, ec);
  check("private key", o.tls_key);
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1)
    throw InvalidConfigError("TLS: private key " + o.tls_key + " does not match certificate " + o.tls_cert);
  ctx->load_verify_file(o.tls_ca, ec);
  check("CA", o.tls_ca);
  ctx->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert, ec);
  return ctx;
}

}  // namespace hmc::detail
