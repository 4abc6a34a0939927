#pragma once
// The TLS context of a connection: from the control channel's CtrlOptions or the store's TlsOptions.
#include <boost/asio/ssl/context.hpp>
#include <memory>
#include <string>

#include "hmc/ctrl_options.hpp"
#include "hmc/tls_options.hpp"

namespace hmc::detail {

// Null when nothing is configured. Both roles present the certificate and require the peer's,
// verified against the CA files (and revocation lists), TLS 1.2 or later. InvalidConfigError naming
// `what` (the settings, for the user) and the file that failed.
std::unique_ptr<boost::asio::ssl::context> make_tls_context(const TlsOptions& o, const std::string& what);

// The control channel's three files (tls_cert, tls_key, tls_ca or HMC_TLS_CERT/KEY/CA).
std::unique_ptr<boost::asio::ssl::context> make_tls_context(const CtrlOptions& o);

}  // namespace hmc::detail
