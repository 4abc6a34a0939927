#include "hmc/ctrl_options.hpp"

#include <cstdlib>
#include <string_view>

#include "hmc/error.hpp"

namespace hmc {

CtrlOptions CtrlOptions::from_env() {
  CtrlOptions o;
  if (const char* t = std::getenv("CTRL_TRANSPORT"); t != nullptr && *t != '\0') {
    const std::string_view v(t);
    if (v == "tcp") o.transport = CtrlTransport::tcp;
    else if (v == "uds") o.transport = CtrlTransport::uds;
    else if (v == "auto") o.transport = CtrlTransport::automatic;
    else throw InvalidConfigError("CTRL_TRANSPORT must be tcp, uds or auto, not '" + std::string(v) + "'");
  }
  if (const char* d = std::getenv("HMC_CTRL_UDS_DIR"); d != nullptr && *d != '\0') o.uds_dir = d;
  return o;
}

}  // namespace hmc
