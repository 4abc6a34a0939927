#include "transport/fast_message.hpp"

#include <algorithm>

#include "wire/byte_order.hpp"

namespace hmc::detail {

namespace {
constexpr std::uint32_t kFastMagic = 0x31464d48;  // "HMF1"
}

FastHeader encode_fast_header(std::uint64_t token) {
  FastHeader h{};
  store_le32(h.data(), kFastMagic);
  store_le64(h.data() + 4, token);
  return h;
}

std::optional<std::uint64_t> parse_fast_header(std::span<const std::byte> header) {
  if (header.size() != kFastHeaderSize || load_le32(header.data()) != kFastMagic) return std::nullopt;
  return load_le64(header.data() + 4);
}

std::vector<std::byte> encode_fast_message(const CtrlMessage& m) {
  std::vector<std::byte> out(1 + m.bytes().size());
  out[0] = static_cast<std::byte>(m.kind());
  std::copy(m.bytes().begin(), m.bytes().end(), out.begin() + 1);
  return out;
}

std::optional<CtrlMessage> decode_fast_message(std::span<const std::byte> body, std::size_t max_payload) {
  if (body.empty() || body.size() - 1 > max_payload) return std::nullopt;
  const auto kind = static_cast<CtrlKind>(std::to_integer<std::uint8_t>(body[0]));
  if (kind != CtrlKind::tag && kind != CtrlKind::bytes) return std::nullopt;
  if (kind == CtrlKind::tag && body.size() != 1 + 8) return std::nullopt;
  return CtrlMessage::from_wire(kind, std::vector<std::byte>(body.begin() + 1, body.end()));
}

}  // namespace hmc::detail
