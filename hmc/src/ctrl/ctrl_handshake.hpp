#pragma once
// The control channel's authenticated handshake as pure functions and state machines: frames in,
// frames out, no I/O, no clock. CtrlChannelImpl drives them over sockets; the fuzz target drives
// them directly.
//
//   client                                   server
//   HELLO {rank|any, flags, heartbeat, Nc, ticket}  -->
//                                        <--  CHALLENGE {Ns}
//   PROOF {HMAC(K, "HMC-ctrl/2 client" | HELLO | Ns)}  -->
//                                        <--  WELCOME {ranks, heartbeat, uds offer,
//                                                      HMAC(K, "HMC-ctrl/2 server" | HELLO | Ns | WELCOME)}
//                                             or REJECT {code, reason}
//
// Both proofs cover both nonces and the HELLO; the role labels differ, so a proof is never valid
// in the other direction, and a recorded exchange never verifies against a fresh nonce.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ctrl/ctrl_frame.hpp"
#include "security/auth.hpp"

namespace hmc::detail {

inline constexpr std::uint32_t kAnyRank = 0xFFFFFFFFu;  // HELLO: "assign me a rank"
// Every handshake frame fits in this (the largest, WELCOME, is 82 bytes + a socket path <= 107).
inline constexpr std::uint32_t kMaxHandshakeFrame = 512;
inline constexpr std::size_t kMaxUdsPath = 107;  // sockaddr_un::sun_path less the terminator
inline constexpr std::size_t kMaxRejectReason = 256;
// The reason of an auth_failed REJECT that a TLS server sends a client that spoke plain text (the
// client explains it as a TLS mismatch; any other auth_failed reason means a wrong proof).
inline constexpr const char* kRejectTlsRequired = "TLS required";

// HELLO flags
inline constexpr std::uint32_t kHelloMayUseUds = 1;  // client is on this host and may take a Unix socket
inline constexpr std::uint32_t kHelloUpgrade = 2;    // this HELLO is on the Unix socket; `ticket` names the TCP leg
// Bits 8-11: the data transport the client chose for this connection (0: the server's default),
// for the layer above; authenticated with the rest of the HELLO.
inline constexpr std::uint32_t kHelloPlaneShift = 8;
inline constexpr std::uint32_t kHelloPlaneMask = 0xF00;
inline constexpr std::uint32_t kMaxPlane = kHelloPlaneMask >> kHelloPlaneShift;
inline constexpr std::uint32_t kHelloKnownFlags = kHelloMayUseUds | kHelloUpgrade | kHelloPlaneMask;
inline constexpr std::uint8_t hello_plane(std::uint32_t flags) {
  return static_cast<std::uint8_t>((flags & kHelloPlaneMask) >> kHelloPlaneShift);
}

enum class RejectCode : std::uint8_t {
  auth_failed = 1,  // the proof did not verify
  rank_in_use = 2,  // another live (or reserved) connection holds the rank
  own_rank = 3,     // the client asked for the server's own rank
  busy = 4,         // too many connections or handshakes
  bad_ticket = 5,   // an upgrade for a TCP leg that is not pending
  protocol = 6,     // malformed or unexpected message
  transport = 7,    // the server cannot serve the data transport the HELLO names
};

struct HelloMsg {
  std::uint32_t rank = kAnyRank;
  std::uint32_t flags = 0;
  std::uint32_t heartbeat_ms = 0;  // the client's heartbeat interval (0: none)
  Nonce nonce{};
  Nonce ticket{};  // zero unless kHelloUpgrade
};

struct WelcomeMsg {
  std::uint32_t server_rank = 0;
  std::uint32_t rank = 0;          // the client's rank (assigned for "any")
  std::uint32_t heartbeat_ms = 0;  // the interval both sides use (see heartbeat_for)
  Nonce ticket{};                  // non-zero when uds_path is offered: quote it in the upgrade HELLO
  std::string uds_path;            // empty: no Unix socket offered
  Mac mac{};
};

struct RejectMsg {
  RejectCode code = RejectCode::protocol;
  std::string reason;
};

// The heartbeat interval of a connection: the shorter of both sides' so that neither declares the
// other lost for keeping its own (longer) rhythm; none if either side has heartbeats off.
std::uint32_t heartbeat_for(std::uint32_t client_ms, std::uint32_t server_ms);

// Codecs: encode_* returns a payload; decode_* returns an empty string or what is wrong.
std::vector<std::byte> encode_hello(const HelloMsg& m);
std::string decode_hello(std::span<const std::byte> p, HelloMsg& out);
std::vector<std::byte> encode_welcome_body(const WelcomeMsg& m);  // everything but the mac
std::vector<std::byte> encode_welcome(const WelcomeMsg& m);
std::string decode_welcome(std::span<const std::byte> p, WelcomeMsg& out);
std::vector<std::byte> encode_reject(const RejectMsg& m);
std::string decode_reject(std::span<const std::byte> p, RejectMsg& out);

Mac client_proof(const AuthKey& key, std::span<const std::byte> hello, const Nonce& server_nonce);
Mac server_proof(const AuthKey& key, std::span<const std::byte> hello, const Nonce& server_nonce,
                 std::span<const std::byte> welcome_body);

// A whole REJECT frame.
std::vector<std::byte> reject_frame(RejectCode code, const std::string& reason);

// What a state machine wants after a frame: send `reply` (if any) and read on, or stop.
struct HandshakeStep {
  enum class What { reply, verified, failed };
  What what = What::failed;
  std::vector<std::byte> reply;  // a whole frame to send (empty: none)
  RejectCode code = RejectCode::protocol;
  std::string why;
};

// The server's side of one handshake. `authenticate` false accepts any proof (explicit opt-out).
class ServerHandshake {
 public:
  ServerHandshake(const AuthKey& key, bool authenticate, const Nonce& server_nonce);

  // HELLO -> reply CHALLENGE; PROOF -> verified (then welcome()) or failed (reply is a REJECT).
  HandshakeStep on_frame(FrameType type, std::span<const std::byte> payload);

  // After `verified`: the client's HELLO, and the WELCOME frame with the server's proof.
  const HelloMsg& hello() const noexcept { return hello_; }
  std::vector<std::byte> welcome(WelcomeMsg m) const;

 private:
  enum class State { want_hello, want_proof, verified, failed };
  HandshakeStep fail(RejectCode code, std::string why);

  const AuthKey& key_;
  bool authenticate_;
  Nonce server_nonce_;
  State state_ = State::want_hello;
  HelloMsg hello_;
  std::vector<std::byte> hello_bytes_;
};

// The client's side of one handshake.
class ClientHandshake {
 public:
  ClientHandshake(const AuthKey& key, bool authenticate, const HelloMsg& hello);

  std::vector<std::byte> hello_frame() const;

  // CHALLENGE -> reply PROOF; WELCOME -> verified (then welcome()) or failed; REJECT -> failed.
  HandshakeStep on_frame(FrameType type, std::span<const std::byte> payload);

  const WelcomeMsg& welcome() const noexcept { return welcome_; }
  // Set when the server answered REJECT (its code), for the caller's error type.
  std::optional<RejectCode> rejected() const noexcept { return rejected_; }
  const std::string& rejected_reason() const noexcept { return rejected_reason_; }

 private:
  enum class State { want_challenge, want_welcome, verified, failed };
  HandshakeStep fail(RejectCode code, std::string why);

  const AuthKey& key_;
  bool authenticate_;
  std::vector<std::byte> hello_bytes_;
  Nonce server_nonce_{};
  State state_ = State::want_challenge;
  WelcomeMsg welcome_;
  std::optional<RejectCode> rejected_;
  std::string rejected_reason_;
};

}  // namespace hmc::detail
