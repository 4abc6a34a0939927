// libFuzzer target: the control channel's frame decoder, fed in arbitrary pieces.
// Input: byte 0 picks the length limit and byte 1 the piece size; the rest is the byte stream.
// Checks: no crash or sanitizer report, memory follows the bytes received (with the 4 GiB limit a
// decoder that sized its buffer from the header would trip -malloc_limit_mb), and every frame
// decoded re-encodes to exactly the bytes it came from.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "ctrl/ctrl_frame.hpp"

using hmc::detail::Frame;
using hmc::detail::FrameDecoder;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  static constexpr std::uint32_t kLimits[] = {512u, 16u << 20, 0xFFFFFFFFu};
  const std::uint32_t limit = kLimits[data[0] % 3];
  const std::size_t piece = 1 + data[1] % 64;
  const auto* stream = reinterpret_cast<const std::byte*>(data + 2);
  const std::size_t n = size - 2;
  FrameDecoder decoder(limit);
  std::size_t at = 0, frame_start = 0;
  std::string problem;
  while (at < n && problem.empty()) {
    const std::size_t end = at + piece < n ? at + piece : n;
    while (at < end && problem.empty()) {
      Frame f;
      bool done = false;
      const std::size_t used = decoder.consume(std::span(stream + at, end - at), f, done, problem);
      if (used == 0 && problem.empty()) std::abort();  // no progress on non-empty input: a hang
      at += used;
      if (!done) continue;
      if (f.payload.size() != f.header.length || f.header.length > limit) std::abort();
      const auto again = hmc::detail::encode_frame(f.header.type, f.payload);
      if (again.size() != at - frame_start || std::memcmp(again.data(), stream + frame_start, again.size()) != 0)
        std::abort();
      frame_start = at;
    }
  }
  return 0;
}
