// libFuzzer target: the authenticated handshake's parsers and both state machines.
// Input: a sequence of frames, each [type u8][length u8][payload], fed to a ServerHandshake and
// to a ClientHandshake that hold a key the input cannot know. Checks: no crash or sanitizer
// report, neither side ever verifies (a forged proof would be a bug), every message that decodes
// re-encodes to the same bytes; then the same frames against the opt-out mode (no key), whose
// accepting paths build a WELCOME from the fuzzed HELLO.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "ctrl/ctrl_handshake.hpp"

namespace d = hmc::detail;

namespace {

struct Piece {
  d::FrameType type;
  std::span<const std::byte> payload;
};

std::vector<Piece> split(const std::uint8_t* data, std::size_t size) {
  std::vector<Piece> out;
  std::size_t at = 0;
  while (at + 2 <= size) {
    const auto type = static_cast<d::FrameType>(data[at]);
    const std::size_t len = data[at + 1];
    at += 2;
    const std::size_t n = len < size - at ? len : size - at;
    out.push_back(Piece{type, std::span(reinterpret_cast<const std::byte*>(data + at), n)});
    at += n;
  }
  return out;
}

void check_codecs(std::span<const std::byte> p) {
  d::HelloMsg h;
  if (d::decode_hello(p, h).empty() && d::encode_hello(h) != std::vector<std::byte>(p.begin(), p.end())) std::abort();
  d::WelcomeMsg w;
  if (d::decode_welcome(p, w).empty() && d::encode_welcome(w) != std::vector<std::byte>(p.begin(), p.end()))
    std::abort();
  d::RejectMsg r;
  if (d::decode_reject(p, r).empty() && r.reason.size() > d::kMaxRejectReason) std::abort();
}

void run(const std::vector<Piece>& frames, bool authenticate) {
  static const d::AuthKey key(32, std::byte{0x5a});
  const d::Nonce nonce{};  // fixed: runs are reproducible; the input still cannot know the key
  d::ServerHandshake server(key, authenticate, nonce);
  for (const auto& f : frames) {
    const auto step = server.on_frame(f.type, f.payload);
    if (step.what == d::HandshakeStep::What::verified) {
      if (authenticate) std::abort();
      d::WelcomeMsg w;
      w.rank = server.hello().rank;
      w.uds_path = "/run/hmc/hmc-ctrl-1.sock";
      w.ticket = server.hello().nonce;
      if (server.welcome(w).size() > d::kFrameHeaderSize + d::kMaxHandshakeFrame) std::abort();
    }
    if (step.what != d::HandshakeStep::What::reply) break;
  }
  d::HelloMsg hello;
  hello.rank = 1;
  d::ClientHandshake client(key, authenticate, hello);
  for (const auto& f : frames) {
    const auto step = client.on_frame(f.type, f.payload);
    if (step.what == d::HandshakeStep::What::verified && authenticate) std::abort();
    if (step.what != d::HandshakeStep::What::reply) break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto frames = split(data, size);
  for (const auto& f : frames) check_codecs(f.payload);
  run(frames, true);
  run(frames, false);
  return 0;
}
