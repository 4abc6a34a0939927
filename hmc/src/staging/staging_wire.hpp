#pragma once
// Staging's two wire formats, pure functions of their bytes (fuzzable, no transport needed):
// - the prefix a session whose buffer is staged puts before its transport's bootstrap message
//   ("STG1", the device memory type); a session without it sends the bootstrap message unchanged;
// - the stage requests and answers peers exchange over the control fast path.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace hmc::detail {

inline constexpr std::size_t kStagingPrefixSize = 8;

std::vector<std::byte> add_staging_prefix(std::span<const std::byte> info, std::uint32_t memory_type);
// Whether `info` starts with a staging prefix; `rest` is the transport's own bootstrap message.
bool has_staging_prefix(std::span<const std::byte> info);
std::span<const std::byte> strip_staging_prefix(std::span<const std::byte> info);

// A request to the owner of a staged buffer: copy [offset, offset + size) between its host mirror
// and its device buffer (stage_in: mirror -> device, after puts; stage_out: device -> mirror,
// before gets). The answer carries the request's id and a Status value (0: done).
enum class StageKind : std::uint8_t { stage_in = 1, stage_out = 2, answer = 3 };

struct StageMessage {
  StageKind kind = StageKind::stage_in;
  std::uint64_t id = 0;
  std::uint64_t offset = 0;  // requests
  std::uint64_t size = 0;    // requests
  std::uint32_t status = 0;  // answers
};

// The first byte marks a staging message among the fast path's control messages (whose first byte
// is a CtrlKind, never this value).
inline constexpr std::byte kStageMarker{0xA7};

std::vector<std::byte> encode_stage_message(const StageMessage& m);
bool is_stage_message(std::span<const std::byte> bytes) noexcept;
// nullopt for anything but exactly one well-formed staging message.
std::optional<StageMessage> decode_stage_message(std::span<const std::byte> bytes);

}  // namespace hmc::detail
