#pragma once
// The control messages of the collectives (CtrlKind::bytes, 48 bytes, little-endian):
//   magic u32 "HMCW" | kind u8 | reason u8 | step u16 | seq u64 | a u64 | b u64 | c u64 | d u64
// seq numbers collective rounds (the same on every rank), step the message within a round. A
// notice with reason kInline carries its piece (b bytes, at most kMaxInline) after the 48 bytes:
// small pieces travel in the message itself, without a get.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hmc/status.hpp"

namespace hmc::detail {

enum class WorldKind : std::uint8_t {
  notice = 1,   // a = offset of the piece in the sender's buffer, b = its size, c, d: per collective
  ready = 2,    // the sender entered the round (its buffer may be written / the root may go on)
  release = 3,  // the root is done with the round; c = number of rounds
  signal = 4,   // a barrier round
  abort = 5,    // reason = hmc::Status, a = the rank at fault; the world is unusable from now on
};

struct WorldMessage {
  WorldKind kind = WorldKind::signal;
  std::uint8_t reason = 0;
  std::uint16_t step = 0;
  std::uint64_t seq = 0;
  std::uint64_t a = 0, b = 0, c = 0, d = 0;
};

inline constexpr std::size_t kWorldMessageSize = 48;
inline constexpr std::uint8_t kInline = 1;
inline constexpr std::size_t kMaxInline = 8192;

std::vector<std::byte> encode(const WorldMessage& m, std::span<const std::byte> payload = {});
// nullopt with `why` when the bytes are not a well-formed world message; `payload` is the inline piece.
std::optional<WorldMessage> decode_world_message(std::span<const std::byte> bytes, std::string& why,
                                                 std::span<const std::byte>* payload = nullptr);
const char* to_string(WorldKind k) noexcept;

}  // namespace hmc::detail
