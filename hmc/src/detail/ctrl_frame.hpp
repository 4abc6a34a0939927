#pragma once
// Control-channel framing: a 16-byte little-endian header, then `length` payload bytes.
//   magic u32 "HMC1" | version u8 | type u8 | flags u16 | length u32 | reserved u32 (zero)
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hmc::detail {

inline constexpr std::uint32_t kFrameMagic = 0x31434D48;  // bytes 'H' 'M' 'C' '1'
inline constexpr std::uint8_t kFrameVersion = 1;
inline constexpr std::size_t kFrameHeaderSize = 16;

enum class FrameType : std::uint8_t {
  hello = 1,         // client -> server: u32 rank
  hello_ack = 2,     // server -> client: u32 rank
  tag = 3,           // u64 tag
  bytes = 4,         // raw payload
  hello_reject = 5,  // server -> client: UTF-8 reason, then close
  transport = 6,     // HMC's own data-plane bootstrap (UCX addresses, rkeys), never seen by ctrl_recv
};

struct FrameHeader {
  std::uint32_t magic = kFrameMagic;
  std::uint8_t version = kFrameVersion;
  FrameType type = FrameType::bytes;
  std::uint16_t flags = 0;
  std::uint32_t length = 0;
};

using HeaderBytes = std::array<std::byte, kFrameHeaderSize>;

HeaderBytes encode_header(const FrameHeader& h);

// Decodes and validates; returns an empty string when valid, else what is wrong with it.
std::string decode_header(const HeaderBytes& bytes, std::uint32_t max_length, FrameHeader& out);

// A whole frame (header + payload) ready to write in one piece.
std::vector<std::byte> encode_frame(FrameType type, const std::byte* payload, std::size_t length);

}  // namespace hmc::detail
