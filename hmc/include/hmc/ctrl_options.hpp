#pragma once
// Settings of a control channel; defaults come from the environment where the reference had them.
// Every resource limit is here with its default; docs/security.md ("Resource limits") explains each.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace hmc {

enum class CtrlTransport {
  automatic,  // a same-host peer moves to the Unix socket the server names; TCP otherwise
  tcp,
  uds,  // same-host only: fail unless the server offers its Unix socket
};

struct CtrlOptions {
  CtrlTransport transport = CtrlTransport::automatic;
  // Where a listener puts its Unix socket: a directory, or a full socket path (`.../name.sock`).
  // Empty: $XDG_RUNTIME_DIR/hmc, else `/tmp/hmc-<uid>`. A directory that is not this user's with
  // mode 0700 (such as /tmp) gets a private `hmc-<uid>` subdirectory.
  std::string uds_dir;
  bool uds_any_user = false;  // accept Unix-socket peers of another uid (SO_PEERCRED); off: same uid only

  // Authentication (docs/security.md "The key"). Empty key: HMC_AUTH_KEY, then the per-user key file.
  std::string auth_key;
  bool authenticate = true;  // false: explicit opt-out, logged at warn; the peer must opt out too

  // TLS for TCP connections: all three or none (HMC_TLS_CERT / HMC_TLS_KEY / HMC_TLS_CA). Both
  // sides present a certificate and verify the peer's against tls_ca; the key handshake runs inside.
  std::string tls_cert;  // PEM certificate (chain) of this process
  std::string tls_key;   // PEM private key
  std::string tls_ca;    // PEM CA certificate(s) a peer's certificate must chain to

  std::uint32_t max_frame_length = 16u << 20;     // larger frames close the connection
  std::chrono::milliseconds hello_timeout{5000};  // the whole handshake (TLS included) after connect/accept
  std::chrono::milliseconds send_timeout{30000};  // a send stuck this long declares the peer lost

  // Liveness: a heartbeat frame after heartbeat_interval without sending; a peer from which nothing
  // arrived for heartbeat_interval * heartbeat_misses is lost. Zero interval: no heartbeats.
  std::chrono::milliseconds heartbeat_interval{1000};
  std::uint32_t heartbeat_misses = 5;
  // A frame that has started arriving and then sees no byte for this long closes the connection.
  std::chrono::milliseconds partial_frame_timeout{10000};

  // Accepted connections still in their handshake, in all and from one source address. A newcomer
  // that finds no room evicts the oldest (of its source when that source is at its cap).
  std::size_t max_handshakes = 64;
  std::size_t max_handshakes_per_source = 16;
  std::size_t max_connections = 1024;    // accepted connections in all (handshaking + peers)
  std::size_t inbox_budget = 64u << 20;  // bytes queued for ctrl_recv per peer before reading pauses
  // Bytes queued for ctrl_recv over all peers: past it, a peer holding more than an even share of
  // it stops being read too, so the total stays bounded however many peers connect.
  std::size_t total_inbox_budget = 256u << 20;

  // Defaults, overridden by CTRL_TRANSPORT=tcp|uds|auto, HMC_CTRL_UDS_DIR and HMC_TLS_CERT /
  // HMC_TLS_KEY / HMC_TLS_CA; INVALID_CONFIG on a bad value.
  static CtrlOptions from_env();
};

}  // namespace hmc
