#include "security/tls_context.hpp"

#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include "hmc/error.hpp"

namespace hmc::detail {

namespace ssl = boost::asio::ssl;

namespace {

// Every CRL in a PEM file into the context's store; the number loaded.
int add_crls(ssl::context& ctx, const std::string& file, const std::string& what) {
  BIO* bio = BIO_new_file(file.c_str(), "r");
  if (bio == nullptr) throw InvalidConfigError(what + ": cannot open revocation list " + file);
  X509_STORE* store = SSL_CTX_get_cert_store(ctx.native_handle());
  int n = 0;
  while (X509_CRL* crl = PEM_read_bio_X509_CRL(bio, nullptr, nullptr, nullptr)) {
    const int ok = X509_STORE_add_crl(store, crl);
    X509_CRL_free(crl);
    if (ok != 1) break;
    ++n;
  }
  BIO_free(bio);
  ERR_clear_error();  // the read that ended the loop leaves "no start line" behind
  if (n == 0) throw InvalidConfigError(what + ": no revocation list in " + file + " (PEM X509 CRL expected)");
  return n;
}

}  // namespace

std::unique_ptr<ssl::context> make_tls_context(const TlsOptions& o, const std::string& what) {
  if (!o.configured()) return nullptr;
  const bool has_key = !o.key.empty() || !o.key_pem.empty();
  if (o.cert.empty() || !has_key || o.ca.empty())
    throw InvalidConfigError(what + " needs a certificate, its private key and at least one CA; missing " +
                             std::string(o.cert.empty() ? "the certificate " : "") +
                             (has_key ? "" : "the private key ") + (o.ca.empty() ? "the CA" : ""));
  if (!o.key.empty() && !o.key_pem.empty())
    throw InvalidConfigError(what + ": give the private key as a file or as PEM text, not both");
  auto ctx = std::make_unique<ssl::context>(ssl::context::tls);
  boost::system::error_code ec;
  auto check = [&](const char* kind, const std::string& file) {
    if (ec) throw InvalidConfigError(what + ": cannot load " + std::string(kind) + " " + file + ": " + ec.message());
  };
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                       ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1,
                   ec);
  ctx->use_certificate_chain_file(o.cert, ec);
  check("certificate", o.cert);
  // OpenSSL asks for the password only for an encrypted key; an empty one fails such a key cleanly.
  ctx->set_password_callback([pw = o.key_password](std::size_t, ssl::context::password_purpose) { return pw; }, ec);
  const std::string key_name = o.key.empty() ? "private key (PEM text)" : "private key";
  if (o.key.empty()) ctx->use_private_key(boost::asio::buffer(o.key_pem), ssl::context::pem, ec);
  else ctx->use_private_key_file(o.key, ssl::context::pem, ec);
  if (ec)
    throw InvalidConfigError(what + ": cannot load the " + key_name + (o.key.empty() ? "" : " " + o.key) + ": " +
                             ec.message() + (o.key_password.empty() ? "" : " (wrong password?)"));
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1)
    throw InvalidConfigError(what + ": the " + key_name + " does not match certificate " + o.cert);
  for (const auto& ca : o.ca) {
    ctx->load_verify_file(ca, ec);
    check("CA", ca);
  }
  if (!o.crl.empty()) {
    for (const auto& crl : o.crl) add_crls(*ctx, crl, what);
    // The peer's own certificate is checked against its issuer's list (one list per issuing CA).
    X509_STORE_set_flags(SSL_CTX_get_cert_store(ctx->native_handle()), X509_V_FLAG_CRL_CHECK);
  }
  ctx->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert, ec);
  return ctx;
}

std::unique_ptr<ssl::context> make_tls_context(const CtrlOptions& o) {
  const int given = !o.tls_cert.empty() + !o.tls_key.empty() + !o.tls_ca.empty();
  if (given == 0) return nullptr;
  if (given != 3)
    throw InvalidConfigError(
        "TLS needs all of tls_cert, tls_key and tls_ca (HMC_TLS_CERT, HMC_TLS_KEY, HMC_TLS_CA); missing " +
        std::string(o.tls_cert.empty() ? "tls_cert " : "") + (o.tls_key.empty() ? "tls_key " : "") +
        (o.tls_ca.empty() ? "tls_ca" : ""));
  TlsOptions t;
  t.cert = o.tls_cert;
  t.key = o.tls_key;
  t.ca = {o.tls_ca};
  return make_tls_context(t, "TLS");
}

}  // namespace hmc::detail
