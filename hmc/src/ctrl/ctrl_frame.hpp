#pragma once
// Control-channel framing: a 16-byte little-endian header, then `length` payload bytes.
//   magic u32 "HMC1" | version u8 | type u8 | flags u16 | length u32 | reserved u32 (zero)
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace hmc::detail {

inline constexpr std::uint32_t kFrameMagic = 0x31434D48;  // bytes 'H' 'M' 'C' '1'
inline constexpr std::uint8_t kFrameVersion = 2;          // 2: authenticated handshake, heartbeats
inline constexpr std::size_t kFrameHeaderSize = 16;

enum class FrameType : std::uint8_t {
  hello = 1,      // client -> server: requested rank, flags, client nonce (ctrl_handshake.hpp)
  welcome = 2,    // server -> client: ranks, Unix socket offer, the server's proof
  tag = 3,        // u64 tag
  bytes = 4,      // raw payload
  reject = 5,     // server -> client: reason code and text, then close
  transport = 6,  // HMC's own data-plane bootstrap (UCX addresses, rkeys), never seen by ctrl_recv
  heartbeat = 7,  // empty; sent when a connection has been quiet for heartbeat_interval
  challenge = 8,  // server -> client: server nonce
  proof = 9,      // client -> server: the client's proof
  stay = 10,      // client -> server: keep this TCP connection (no Unix socket upgrade)
};
inline constexpr std::uint8_t kMaxFrameType = 10;

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
inline std::vector<std::byte> encode_frame(FrameType type, std::span<const std::byte> payload) {
  return encode_frame(type, payload.data(), payload.size());
}

struct Frame {
  FrameHeader header;
  std::vector<std::byte> payload;
};

// Incremental decoder: bytes in as they arrive, whole frames out. The payload grows with the bytes
// received (never to the header's claimed length up front), so a peer that claims 16 MiB and sends
// nothing costs nothing. No I/O: the fuzz target drives it directly.
class FrameDecoder {
 public:
  explicit FrameDecoder(std::uint32_t max_length) : max_length_(max_length) {}

  // Applies to headers decoded from now on (small before authentication, max_frame_length after).
  void set_max_length(std::uint32_t max_length) noexcept { max_length_ = max_length; }

  // Consumes bytes from `in` up to the end of at most one frame. Returns the number consumed;
  // `done` is true when `out` holds a whole frame. A non-empty `problem` means the stream is
  // malformed and must be closed; nothing more may be fed then.
  std::size_t consume(std::span<const std::byte> in, Frame& out, bool& done, std::string& problem);

  // True while part of a frame has been received (for the partial-frame idle timeout).
  bool mid_frame() const noexcept { return header_have_ != 0; }
  // Bytes of the frame in progress, for error messages.
  std::string progress() const;

 private:
  std::uint32_t max_length_;
  HeaderBytes header_bytes_{};
  std::size_t header_have_ = 0;  // 0..16; 16 means the header is decoded into frame_
  Frame frame_;
};

}  // namespace hmc::detail
