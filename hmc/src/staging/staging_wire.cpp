#include "staging/staging_wire.hpp"

#include <algorithm>
#include <array>

#include "wire/byte_order.hpp"

namespace hmc::detail {

namespace {
constexpr std::array<std::byte, 4> kPrefixMagic{std::byte{'S'}, std::byte{'T'}, std::byte{'G'}, std::byte{'1'}};
constexpr std::size_t kRequestSize = 1 + 1 + 8 + 8 + 8;  // marker, kind, id, offset, size
constexpr std::size_t kAnswerSize = 1 + 1 + 8 + 4;       // marker, kind, id, status
}  // namespace

std::vector<std::byte> add_staging_prefix(std::span<const std::byte> info, std::uint32_t memory_type) {
  std::vector<std::byte> out(kStagingPrefixSize + info.size());
  std::copy(kPrefixMagic.begin(), kPrefixMagic.end(), out.begin());
  store_le32(out.data() + 4, memory_type);
  std::copy(info.begin(), info.end(), out.begin() + kStagingPrefixSize);
  return out;
}

bool has_staging_prefix(std::span<const std::byte> info) {
  return info.size() >= kStagingPrefixSize && std::equal(kPrefixMagic.begin(), kPrefixMagic.end(), info.begin());
}

std::span<const std::byte> strip_staging_prefix(std::span<const std::byte> info) {
  return has_staging_prefix(info) ? info.subspan(kStagingPrefixSize) : info;
}

std::vector<std::byte> encode_stage_message(const StageMessage& m) {
  const bool answer = m.kind == StageKind::answer;
  std::vector<std::byte> out(answer ? kAnswerSize : kRequestSize);
  out[0] = kStageMarker;
  out[1] = static_cast<std::byte>(m.kind);
  store_le64(out.data() + 2, m.id);
  if (answer) {
    store_le32(out.data() + 10, m.status);
  } else {
    store_le64(out.data() + 10, m.offset);
    store_le64(out.data() + 18, m.size);
  }
  return out;
}

bool is_stage_message(std::span<const std::byte> bytes) noexcept { return !bytes.empty() && bytes[0] == kStageMarker; }

std::optional<StageMessage> decode_stage_message(std::span<const std::byte> bytes) {
  if (bytes.size() < 2 || bytes[0] != kStageMarker) return std::nullopt;
  StageMessage m;
  m.kind = static_cast<StageKind>(bytes[1]);
  switch (m.kind) {
    case StageKind::stage_in:
    case StageKind::stage_out:
      if (bytes.size() != kRequestSize) return std::nullopt;
      m.id = load_le64(bytes.data() + 2);
      m.offset = load_le64(bytes.data() + 10);
      m.size = load_le64(bytes.data() + 18);
      return m;
    case StageKind::answer:
      if (bytes.size() != kAnswerSize) return std::nullopt;
      m.id = load_le64(bytes.data() + 2);
      m.status = load_le32(bytes.data() + 10);
      return m;
  }
  return std::nullopt;
}

}  // namespace hmc::detail
