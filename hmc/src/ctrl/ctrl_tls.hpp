#pragma once
// The TLS context of a control channel, from CtrlOptions::tls_cert / tls_key / tls_ca.
#include <boost/asio/ssl/context.hpp>
#include <memory>

#include "hmc/ctrl_options.hpp"

namespace hmc::detail {

// Null when no TLS file is configured. Both roles present the certificate and require the peer's,
// verified against tls_ca, TLS 1.2 or later. InvalidConfigError naming the file that failed.
std::unique_ptr<boost::asio::ssl::context> make_tls_context(const CtrlOptions& o);

}  // namespace hmc::detail
