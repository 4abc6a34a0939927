#include "ctrl/ctrl_handshake.hpp"

#include <algorithm>
#include <cstring>

#include "wire/byte_order.hpp"

namespace hmc::detail {
namespace {

constexpr std::size_t kHelloSize = 4 + 4 + 4 + 32 + 32;
constexpr std::size_t kWelcomeFixed = 4 + 4 + 4 + 32 + 2;  // then the path, then the 32-byte mac

const std::string kClientLabel = "HMC-ctrl/2 client";
const std::string kServerLabel = "HMC-ctrl/2 server";

bool all_zero(const Nonce& n) {
  return std::all_of(n.begin(), n.end(), [](std::byte b) { return b == std::byte{0}; });
}

std::span<const std::byte> view(const Nonce& n) { return {n.data(), n.size()}; }

// The payload of a frame of the given type, or a reason it cannot be that frame.
std::string expect(FrameType got, FrameType want, const char* name) {
  if (got == want) return {};
  return std::string("expected ") + name + ", got frame type " + std::to_string(static_cast<int>(got));
}

// The steps both sides take: send a frame and read on, or done.
HandshakeStep reply_step(std::vector<std::byte> frame) {
  HandshakeStep s;
  s.what = HandshakeStep::What::reply;
  s.reply = std::move(frame);
  return s;
}

HandshakeStep verified_step() {
  HandshakeStep s;
  s.what = HandshakeStep::What::verified;
  return s;
}

constexpr const char* kAfterTheEnd = "frame after the handshake ended";

}  // namespace

std::uint32_t heartbeat_for(std::uint32_t client_ms, std::uint32_t server_ms) {
  if (client_ms == 0 || server_ms == 0) return 0;
  return std::min(client_ms, server_ms);
}

std::vector<std::byte> encode_hello(const HelloMsg& m) {
  std::vector<std::byte> p(kHelloSize);
  store_le32(p.data(), m.rank);
  store_le32(p.data() + 4, m.flags);
  store_le32(p.data() + 8, m.heartbeat_ms);
  std::memcpy(p.data() + 12, m.nonce.data(), 32);
  std::memcpy(p.data() + 44, m.ticket.data(), 32);
  return p;
}

std::string decode_hello(std::span<const std::byte> p, HelloMsg& out) {
  if (p.size() != kHelloSize) return "HELLO of " + std::to_string(p.size()) + " bytes";
  out.rank = load_le32(p.data());
  out.flags = load_le32(p.data() + 4);
  out.heartbeat_ms = load_le32(p.data() + 8);
  std::memcpy(out.nonce.data(), p.data() + 12, 32);
  std::memcpy(out.ticket.data(), p.data() + 44, 32);
  if ((out.flags & ~kHelloKnownFlags) != 0) return "HELLO with unknown flags " + std::to_string(out.flags);
  if (((out.flags & kHelloUpgrade) != 0) == all_zero(out.ticket)) return "HELLO ticket does not match its upgrade flag";
  if ((out.flags & kHelloUpgrade) != 0 && out.rank == kAnyRank) return "upgrade HELLO without a rank";
  return {};
}

std::vector<std::byte> encode_welcome_body(const WelcomeMsg& m) {
  std::vector<std::byte> p(kWelcomeFixed + m.uds_path.size());
  store_le32(p.data(), m.server_rank);
  store_le32(p.data() + 4, m.rank);
  store_le32(p.data() + 8, m.heartbeat_ms);
  std::memcpy(p.data() + 12, m.ticket.data(), 32);
  store_le16(p.data() + 44, static_cast<std::uint16_t>(m.uds_path.size()));
  std::memcpy(p.data() + kWelcomeFixed, m.uds_path.data(), m.uds_path.size());
  return p;
}

std::vector<std::byte> encode_welcome(const WelcomeMsg& m) {
  auto p = encode_welcome_body(m);
  p.insert(p.end(), m.mac.begin(), m.mac.end());
  return p;
}

std::string decode_welcome(std::span<const std::byte> p, WelcomeMsg& out) {
  if (p.size() < kWelcomeFixed + 32) return "WELCOME of " + std::to_string(p.size()) + " bytes";
  out.server_rank = load_le32(p.data());
  out.rank = load_le32(p.data() + 4);
  out.heartbeat_ms = load_le32(p.data() + 8);
  std::memcpy(out.ticket.data(), p.data() + 12, 32);
  const std::size_t path_len = load_le16(p.data() + 44);
  if (path_len > kMaxUdsPath) return "WELCOME with a socket path of " + std::to_string(path_len) + " bytes";
  if (p.size() != kWelcomeFixed + path_len + 32) return "WELCOME of " + std::to_string(p.size()) + " bytes";
  out.uds_path.assign(reinterpret_cast<const char*>(p.data() + kWelcomeFixed), path_len);
  std::memcpy(out.mac.data(), p.data() + kWelcomeFixed + path_len, 32);
  if (out.uds_path.find('\0') != std::string::npos) return "WELCOME socket path with a NUL byte";
  if (!out.uds_path.empty() && out.uds_path.front() != '/') return "WELCOME socket path is not absolute";
  if (out.uds_path.empty() != all_zero(out.ticket)) return "WELCOME ticket does not match its socket offer";
  if (out.rank == kAnyRank || out.server_rank == kAnyRank) return "WELCOME without a rank";
  return {};
}

std::vector<std::byte> encode_reject(const RejectMsg& m) {
  const std::size_t n = std::min(m.reason.size(), kMaxRejectReason);
  std::vector<std::byte> p(3 + n);
  p[0] = static_cast<std::byte>(m.code);
  store_le16(p.data() + 1, static_cast<std::uint16_t>(n));
  std::memcpy(p.data() + 3, m.reason.data(), n);
  return p;
}

std::string decode_reject(std::span<const std::byte> p, RejectMsg& out) {
  if (p.size() < 3) return "REJECT of " + std::to_string(p.size()) + " bytes";
  const auto code = std::to_integer<std::uint8_t>(p[0]);
  if (code < 1 || code > static_cast<std::uint8_t>(RejectCode::transport))
    return "REJECT with unknown code " + std::to_string(code);
  out.code = static_cast<RejectCode>(code);
  const std::size_t n = load_le16(p.data() + 1);
  if (n > kMaxRejectReason || p.size() != 3 + n) return "REJECT of " + std::to_string(p.size()) + " bytes";
  out.reason.clear();
  // Only printable ASCII of the peer's text reaches our logs and exceptions.
  for (std::size_t i = 0; i < n; ++i) {
    const char c = static_cast<char>(p[3 + i]);
    out.reason += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  return {};
}

Mac client_proof(const AuthKey& key, std::span<const std::byte> hello, const Nonce& server_nonce) {
  return hmac_sha256(key, {as_bytes(kClientLabel), hello, view(server_nonce)});
}

Mac server_proof(const AuthKey& key, std::span<const std::byte> hello, const Nonce& server_nonce,
                 std::span<const std::byte> welcome_body) {
  return hmac_sha256(key, {as_bytes(kServerLabel), hello, view(server_nonce), welcome_body});
}

std::vector<std::byte> reject_frame(RejectCode code, const std::string& reason) {
  return encode_frame(FrameType::reject, encode_reject(RejectMsg{code, reason}));
}

// ---- server ----

ServerHandshake::ServerHandshake(const AuthKey& key, bool authenticate, const Nonce& server_nonce)
    : key_(key), authenticate_(authenticate), server_nonce_(server_nonce) {}

HandshakeStep ServerHandshake::fail(RejectCode code, std::string why) {
  state_ = State::failed;
  HandshakeStep s;
  s.what = HandshakeStep::What::failed;
  s.code = code;
  s.reply = reject_frame(code, code == RejectCode::auth_failed ? "authentication failed" : why);
  s.why = std::move(why);
  return s;
}

HandshakeStep ServerHandshake::on_frame(FrameType type, std::span<const std::byte> payload) {
  if (state_ == State::want_hello) {
    if (auto why = expect(type, FrameType::hello, "HELLO"); !why.empty()) return fail(RejectCode::protocol, why);
    if (auto why = decode_hello(payload, hello_); !why.empty()) return fail(RejectCode::protocol, why);
    hello_bytes_.assign(payload.begin(), payload.end());
    state_ = State::want_proof;
    return reply_step(encode_frame(FrameType::challenge, view(server_nonce_)));
  }
  if (state_ != State::want_proof) return fail(RejectCode::protocol, kAfterTheEnd);
  if (auto why = expect(type, FrameType::proof, "PROOF"); !why.empty()) return fail(RejectCode::protocol, why);
  if (payload.size() != 32) return fail(RejectCode::protocol, "PROOF of " + std::to_string(payload.size()) + " bytes");
  Mac got;
  std::memcpy(got.data(), payload.data(), 32);
  if (authenticate_ && !macs_equal(got, client_proof(key_, hello_bytes_, server_nonce_)))
    return fail(RejectCode::auth_failed, "the client's proof does not match our key");
  state_ = State::verified;
  return verified_step();
}

std::vector<std::byte> ServerHandshake::welcome(WelcomeMsg m) const {
  if (authenticate_) m.mac = server_proof(key_, hello_bytes_, server_nonce_, encode_welcome_body(m));
  return encode_frame(FrameType::welcome, encode_welcome(m));
}

// ---- client ----

ClientHandshake::ClientHandshake(const AuthKey& key, bool authenticate, const HelloMsg& hello)
    : key_(key), authenticate_(authenticate), hello_bytes_(encode_hello(hello)) {}

std::vector<std::byte> ClientHandshake::hello_frame() const { return encode_frame(FrameType::hello, hello_bytes_); }

HandshakeStep ClientHandshake::fail(RejectCode code, std::string why) {
  state_ = State::failed;
  HandshakeStep s;
  s.what = HandshakeStep::What::failed;
  s.code = code;
  s.why = std::move(why);
  return s;
}

HandshakeStep ClientHandshake::on_frame(FrameType type, std::span<const std::byte> payload) {
  if (type == FrameType::reject && (state_ == State::want_challenge || state_ == State::want_welcome)) {
    RejectMsg r;
    if (auto why = decode_reject(payload, r); !why.empty()) return fail(RejectCode::protocol, why);
    rejected_ = r.code;
    rejected_reason_ = r.reason;
    return fail(r.code, "server rejected HELLO: " + r.reason);
  }
  if (state_ == State::want_challenge) {
    if (auto why = expect(type, FrameType::challenge, "CHALLENGE"); !why.empty())
      return fail(RejectCode::protocol, why);
    if (payload.size() != 32)
      return fail(RejectCode::protocol, "CHALLENGE of " + std::to_string(payload.size()) + " bytes");
    std::memcpy(server_nonce_.data(), payload.data(), 32);
    state_ = State::want_welcome;
    Mac proof{};
    if (authenticate_) proof = client_proof(key_, hello_bytes_, server_nonce_);
    return reply_step(encode_frame(FrameType::proof, std::span<const std::byte>(proof.data(), proof.size())));
  }
  if (state_ != State::want_welcome) return fail(RejectCode::protocol, kAfterTheEnd);
  if (auto why = expect(type, FrameType::welcome, "WELCOME"); !why.empty()) return fail(RejectCode::protocol, why);
  if (auto why = decode_welcome(payload, welcome_); !why.empty()) return fail(RejectCode::protocol, why);
  if (authenticate_ &&
      !macs_equal(welcome_.mac, server_proof(key_, hello_bytes_, server_nonce_, encode_welcome_body(welcome_))))
    return fail(RejectCode::auth_failed, "the server's proof does not match our key");
  state_ = State::verified;
  return verified_step();
}

}  // namespace hmc::detail
