#pragma once
// The control fast path's wire format, the same on every transport: a fixed header that names the
// sender by the secret the receiver gave it in its bootstrap message, then the control message
// (one kind byte and the payload). Pure functions of their bytes: fuzzable, no transport needed.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "hmc/ctrl_message.hpp"

namespace hmc::detail {

inline constexpr std::size_t kFastHeaderSize = 12;  // "HMF1" + the sender's u64 token
using FastHeader = std::array<std::byte, kFastHeaderSize>;

FastHeader encode_fast_header(std::uint64_t token);
// The token, or nullopt when the header is not exactly one well-formed fast-path header.
std::optional<std::uint64_t> parse_fast_header(std::span<const std::byte> header);

// Only tags and byte messages travel the fast path.
std::vector<std::byte> encode_fast_message(const CtrlMessage& m);
// nullopt for an empty body, another kind, a tag that is not 8 bytes, or a payload over max_payload.
std::optional<CtrlMessage> decode_fast_message(std::span<const std::byte> body, std::size_t max_payload);

}  // namespace hmc::detail
