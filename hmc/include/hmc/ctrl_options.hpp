#pragma once
// Settings of a control channel; defaults come from the environment where the reference had them.
#include <chrono>
#include <cstdint>
#include <string>

namespace hmc {

enum class CtrlTransport {
  automatic,  // Unix socket for a same-host peer whose socket file exists, TCP otherwise
  tcp,
  uds,
};

struct CtrlOptions {
  CtrlTransport transport = CtrlTransport::automatic;
  std::string uds_dir = "/tmp";                    // where listeners put hmc-ctrl-<port>.sock
  std::uint32_t max_frame_length = 16u << 20;      // larger frames close the connection
  std::chrono::milliseconds hello_timeout{5000};   // for the rank handshake after connect/accept
  std::chrono::milliseconds send_timeout{30000};   // a send stuck this long declares the peer lost

  // Defaults, overridden by CTRL_TRANSPORT=tcp|uds and HMC_CTRL_UDS_DIR; INVALID_CONFIG on a bad value.
  static CtrlOptions from_env();
};

}  // namespace hmc
