#include "world/world_message.hpp"

#include <cstring>

#include "wire/byte_order.hpp"

namespace hmc::detail {

namespace {
constexpr std::uint32_t kMagic = 0x57434D48;  // bytes 'H' 'M' 'C' 'W'
}

std::vector<std::byte> encode(const WorldMessage& m, std::span<const std::byte> payload) {
  std::vector<std::byte> out(kWorldMessageSize + payload.size());
  if (!payload.empty()) std::memcpy(out.data() + kWorldMessageSize, payload.data(), payload.size());
  store_le32(out.data(), kMagic);
  out[4] = static_cast<std::byte>(m.kind);
  out[5] = static_cast<std::byte>(m.reason);
  store_le16(out.data() + 6, m.step);
  store_le64(out.data() + 8, m.seq);
  store_le64(out.data() + 16, m.a);
  store_le64(out.data() + 24, m.b);
  store_le64(out.data() + 32, m.c);
  store_le64(out.data() + 40, m.d);
  return out;
}

std::optional<WorldMessage> decode_world_message(std::span<const std::byte> bytes, std::string& why,
                                                 std::span<const std::byte>* payload) {
  if (bytes.size() < kWorldMessageSize || bytes.size() > kWorldMessageSize + kMaxInline) {
    why = "a control message of " + std::to_string(bytes.size()) + " bytes is not a collective's";
    return std::nullopt;
  }
  if (load_le32(bytes.data()) != kMagic) {
    why = "a control message that is not a collective's (was ctrl_send used beside the collectives?)";
    return std::nullopt;
  }
  WorldMessage m;
  const auto kind = std::to_integer<std::uint8_t>(bytes[4]);
  if (kind < static_cast<std::uint8_t>(WorldKind::notice) || kind > static_cast<std::uint8_t>(WorldKind::abort)) {
    why = "unknown collective message kind " + std::to_string(kind);
    return std::nullopt;
  }
  m.kind = static_cast<WorldKind>(kind);
  m.reason = std::to_integer<std::uint8_t>(bytes[5]);
  // An abort names a failure: 0 (success) is no reason either.
  if (m.kind == WorldKind::abort && (m.reason == 0 || m.reason > static_cast<std::uint8_t>(Status::AUTH_FAILED))) {
    why = "abort with unknown reason " + std::to_string(m.reason);
    return std::nullopt;
  }
  m.step = load_le16(bytes.data() + 6);
  m.seq = load_le64(bytes.data() + 8);
  m.a = load_le64(bytes.data() + 16);
  m.b = load_le64(bytes.data() + 24);
  m.c = load_le64(bytes.data() + 32);
  m.d = load_le64(bytes.data() + 40);
  const auto rest = bytes.subspan(kWorldMessageSize);
  const bool inline_piece = m.kind == WorldKind::notice && m.reason == kInline;
  if (m.kind == WorldKind::notice && m.reason > kInline) {
    why = "notice with unknown flags " + std::to_string(m.reason);
    return std::nullopt;
  }
  if (inline_piece ? rest.size() != m.b : !rest.empty()) {
    why = "a collective message with " + std::to_string(rest.size()) + " bytes after it, announcing " +
          std::to_string(inline_piece ? m.b : 0);
    return std::nullopt;
  }
  if (payload != nullptr) *payload = rest;
  return m;
}

const char* to_string(WorldKind k) noexcept {
  switch (k) {
    case WorldKind::notice: return "notice";
    case WorldKind::ready: return "ready";
    case WorldKind::release: return "release";
    case WorldKind::signal: return "signal";
    case WorldKind::abort: return "abort";
  }
  return "?";
}

}  // namespace hmc::detail
