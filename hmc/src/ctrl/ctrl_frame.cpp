#include "ctrl/ctrl_frame.hpp"

#include <algorithm>
#include <cstring>

#include "wire/byte_order.hpp"

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
  if (out.magic != kFrameMagic) {
    // 0x16 0x03: a TLS record carrying a handshake, i.e. a TLS ClientHello.
    if ((out.magic & 0xFFFFu) == 0x0316u)
      return "a TLS handshake instead of an HMC frame: the peer uses TLS and this side does not (check tls_cert, "
             "tls_key, tls_ca / HMC_TLS_CERT, HMC_TLS_KEY, HMC_TLS_CA on both sides)";
    return "bad magic " + std::to_string(out.magic);
  }
  if (out.version != kFrameVersion)
    return "unknown protocol version " + std::to_string(out.version) + " (this build speaks " +
           std::to_string(kFrameVersion) + ")";
  if (type < static_cast<std::uint8_t>(FrameType::hello) || type > kMaxFrameType)
    return "unknown frame type " + std::to_string(type);
  out.type = static_cast<FrameType>(type);
  if (out.length > max_length)
    return "frame length " + std::to_string(out.length) + " exceeds the maximum " + std::to_string(max_length);
  if (out.type == FrameType::tag && out.length != 8) return "tag frame of " + std::to_string(out.length) + " bytes";
  if ((out.type == FrameType::heartbeat || out.type == FrameType::stay) && out.length != 0)
    return "non-empty heartbeat or stay frame";
  if (out.flags != 0) return "non-zero frame flags";
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

std::size_t FrameDecoder::consume(std::span<const std::byte> in, Frame& out, bool& done, std::string& problem) {
  done = false;
  std::size_t used = 0;
  if (header_have_ < kFrameHeaderSize) {
    const std::size_t n = std::min(in.size(), kFrameHeaderSize - header_have_);
    std::memcpy(header_bytes_.data() + header_have_, in.data(), n);
    header_have_ += n;
    used = n;
    if (header_have_ < kFrameHeaderSize) return used;
    problem = decode_header(header_bytes_, max_length_, frame_.header);
    if (!problem.empty()) return used;
    frame_.payload.clear();
  }
  const std::size_t want = frame_.header.length - frame_.payload.size();
  const std::size_t n = std::min(in.size() - used, want);
  // insert() grows the capacity geometrically: memory stays within twice the bytes received.
  frame_.payload.insert(frame_.payload.end(), in.begin() + static_cast<std::ptrdiff_t>(used),
                        in.begin() + static_cast<std::ptrdiff_t>(used + n));
  used += n;
  if (frame_.payload.size() == frame_.header.length) {
    out = std::move(frame_);
    frame_ = Frame{};
    header_have_ = 0;
    done = true;
  }
  return used;
}

std::string FrameDecoder::progress() const {
  if (header_have_ < kFrameHeaderSize) return std::to_string(header_have_) + " of 16 header bytes";
  return std::to_string(frame_.payload.size()) + " of " + std::to_string(frame_.header.length) + " payload bytes";
}

}  // namespace hmc::detail
