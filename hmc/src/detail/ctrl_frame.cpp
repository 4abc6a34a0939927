#include "detail/ctrl_frame.hpp"

#include <cstring>

#include "detail/byte_order.hpp"

namespace hmc::detail {

HeaderBytes encode_header(const FrameHeader& h) {
  HeaderBytes b{};
  store_le32(b.data(), h.magic);
  b[4] = static_cast<std::byte>(h.version);
  b[5] = static_cast<std::byte>(h.type);
  store_le16(b.data() + 6, h.flags);
  store_le32(b.data() + 8, h.length);
  store_le32(b.data() + 12, 0);
  return b;
}

std::string decode_header(const HeaderBytes& b, std::uint32_t max_length, FrameHeader& out) {
  out.magic = load_le32(b.data());
  out.version = std::to_integer<std::uint8_t>(b[4]);
  const auto type = std::to_integer<std::uint8_t>(b[5]);
  out.flags = load_le16(b.data() + 6);
  out.length = load_le32(b.data() + 8);
  if (out.magic != kFrameMagic) return "bad magic " + std::to_string(out.magic);
  if (out.version != kFrameVersion) return "unknown protocol version " + std::to_string(out.version);
  if (type < static_cast<std::uint8_t>(FrameType::hello) || type > static_cast<std::uint8_t>(FrameType::transport))
    return "unknown frame type " + std::to_string(type);
  out.type = static_cast<FrameType>(type);
  if (out.length > max_length)
    return "frame length " + std::to_string(out.length) + " exceeds the maximum " + std::to_string(max_length);
  if (out.type == FrameType::tag && out.length != 8) return "tag frame of " + std::to_string(out.length) + " bytes";
  if ((out.type == FrameType::hello || out.type == FrameType::hello_ack) && out.length != 4)
    return "hello frame of " + std::to_string(out.length) + " bytes";
  if (load_le32(b.data() + 12) != 0) return "reserved header bytes are not zero";
  return {};
}

std::vector<std::byte> encode_frame(FrameType type, const std::byte* payload, std::size_t length) {
  FrameHeader h;
  h.type = type;
  h.length = static_cast<std::uint32_t>(length);
  std::vector<std::byte> frame(kFrameHeaderSize + length);
  const HeaderBytes hb = encode_header(h);
  std::memcpy(frame.data(), hb.data(), hb.size());
  if (length != 0) std::memcpy(frame.data() + kFrameHeaderSize, payload, length);
  return frame;
}

}  // namespace hmc::detail
