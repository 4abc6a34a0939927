#include "hmc/ctrl_options.hpp"

#include <cstdlib>
#include <string_view>

#include "hmc/error.hpp"

namespace hmc {
namespace {

void from_env_var(const char* name, std::string& field) {
  if (const char* v = std::getenv(name); v != nullptr && *v != '\0') field = v;
}

}  // namespace

CtrlOptions CtrlOptions::from_env() {
  CtrlOptions o;
  if (const char* t = std::getenv("CTRL_TRANSPORT"); t != nullptr && *t != '\0') {
    const std::string_view v(t);
    if (v == "tcp") o.transport = CtrlTransport::tcp;
    else if (v == "uds") o.transport = CtrlTransport::uds;
    else if (v == "auto") o.transport = CtrlTransport::automatic;
    else throw InvalidConfigError("CTRL_TRANSPORT must be tcp, uds or auto, not '" + std::string(v) + "'");
  }
  from_env_var("HMC_CTRL_UDS_DIR", o.uds_dir);
  from_env_var("HMC_TLS_CERT", o.tls_cert);
  from_env_var("HMC_TLS_KEY", o.tls_key);
  from_env_var("HMC_TLS_CA", o.tls_ca);
  return o;
}

}  // namespace hmc
