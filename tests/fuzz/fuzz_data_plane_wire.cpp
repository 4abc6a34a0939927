// libFuzzer target: what a peer sends the data plane: its UCX and TCP peer info (the bootstrap
// message over the control channel), the control fast path's header and message (UCX active messages) and
// GPU staging's stage requests and answers (also on the fast path).
// Input: byte 0 picks the decoder, byte 1 the fast path's payload limit; the rest is the message.
// Checks: no crash or sanitizer report, and whatever decodes re-encodes to exactly its bytes (a
// decoder that accepted trailing or malformed bytes, or read past a field, would differ).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "staging/staging_wire.hpp"
#include "tcp/tcp_peer_info.hpp"
#include "transport/fast_message.hpp"
#include "ucx/ucx_peer_info.hpp"

namespace {

void same_bytes(std::span<const std::byte> a, std::span<const std::byte> b) {
  if (a.size() != b.size() || (a.size() != 0 && std::memcmp(a.data(), b.data(), a.size()) != 0)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data + 2), size - 2);
  switch (data[0] % 5) {
    case 0: {
      hmc::detail::UcxPeerInfo info;
      if (hmc::detail::UcxPeerInfo::decode(bytes, info).empty()) same_bytes(info.encode(), bytes);
      break;
    }
    case 1:
      if (auto token = hmc::detail::parse_fast_header(bytes))
        same_bytes(hmc::detail::encode_fast_header(*token), bytes);
      break;
    case 2:
      if (auto m = hmc::detail::decode_stage_message(bytes)) same_bytes(hmc::detail::encode_stage_message(*m), bytes);
      break;
    case 3: {
      hmc::detail::TcpPeerInfo info;
      if (hmc::detail::TcpPeerInfo::decode(bytes, info).empty()) same_bytes(info.encode(), bytes);
      break;
    }
    default: {
      static constexpr std::size_t kLimits[] = {0, 8, 4096, 16u << 20};
      const std::size_t limit = kLimits[data[1] % 4];
      if (auto m = hmc::detail::decode_fast_message(bytes, limit)) {
        if (m->bytes().size() > limit) std::abort();
        same_bytes(hmc::detail::encode_fast_message(*m), bytes);
      }
      break;
    }
  }
  return 0;
}
