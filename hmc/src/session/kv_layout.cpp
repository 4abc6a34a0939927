#include "hmc/kv_layout.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <string>

#include "hmc/error.hpp"
#include "wire/byte_order.hpp"

namespace hmc {

namespace {
constexpr std::array<char, 8> kMagic{'H', 'M', 'C', 'K', 'V', 'L', '1', '\0'};
constexpr std::size_t kHeader = kMagic.size() + 4;
constexpr std::size_t kRegionBytes = 4 * 8;
constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();

std::string region_name(std::size_t r) { return "KV layout region " + std::to_string(r); }

// The first id of `ids` that is not below every region's block count, as an error naming it.
void check_ids(const std::vector<KvRegion>& regions, std::span<const std::uint64_t> ids, const char* name,
               const char* side) {
  std::size_t r_min = 0;
  for (std::size_t r = 1; r < regions.size(); ++r)
    if (regions[r].block_count < regions[r_min].block_count) r_min = r;
  const std::uint64_t count = regions[r_min].block_count;
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] >= count)
      throw InvalidArgumentError(std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(ids[i]) +
                                 " is past the " + side + " layout's " + std::to_string(count) + " blocks (region " +
                                 std::to_string(r_min) + ")");
}
}  // namespace

KvLayout::KvLayout(std::vector<KvRegion> regions) : regions_(std::move(regions)) {
  if (regions_.empty()) throw InvalidArgumentError("a KV layout needs at least one region");
  if (regions_.size() > kMaxRegions)
    throw InvalidArgumentError("a KV layout has at most " + std::to_string(kMaxRegions) + " regions, not " +
                               std::to_string(regions_.size()));
  for (std::size_t r = 0; r < regions_.size(); ++r) {
    KvRegion& g = regions_[r];
    if (g.stride == 0) g.stride = g.block_bytes;
    if (g.block_bytes == 0) throw InvalidArgumentError(region_name(r) + ": block_bytes must be > 0");
    if (g.block_count == 0) throw InvalidArgumentError(region_name(r) + ": block_count must be > 0");
    if (g.stride < g.block_bytes)
      throw InvalidArgumentError(region_name(r) + ": stride " + std::to_string(g.stride) +
                                 " is shorter than its blocks of " + std::to_string(g.block_bytes) + " bytes");
    // offset + (block_count - 1) * stride + block_bytes, refused where it would wrap.
    const std::size_t last = g.block_count - 1;
    if (last > (kMax - g.block_bytes) / g.stride || g.offset > kMax - g.block_bytes - last * g.stride)
      throw InvalidArgumentError(region_name(r) + " ends past the address space");
    end_ = std::max(end_, g.offset + last * g.stride + g.block_bytes);
  }
}

std::vector<std::byte> KvLayout::to_bytes() const {
  std::vector<std::byte> out(kHeader + regions_.size() * kRegionBytes);
  std::transform(kMagic.begin(), kMagic.end(), out.begin(), [](char c) { return static_cast<std::byte>(c); });
  detail::store_le32(out.data() + kMagic.size(), static_cast<std::uint32_t>(regions_.size()));
  std::byte* p = out.data() + kHeader;
  for (const KvRegion& g : regions_) {
    for (std::size_t v : {g.offset, g.block_bytes, g.block_count, g.stride}) {
      detail::store_le64(p, v);
      p += 8;
    }
  }
  return out;
}

KvLayout KvLayout::from_bytes(std::span<const std::byte> bytes) {
  if (bytes.size() < kHeader || !std::equal(kMagic.begin(), kMagic.end(), bytes.begin(),
                                            [](char c, std::byte b) { return static_cast<std::byte>(c) == b; }))
    throw InvalidArgumentError("not a KV layout (" + std::to_string(bytes.size()) + " bytes without its header)");
  const std::uint32_t n = detail::load_le32(bytes.data() + kMagic.size());
  if (n > kMaxRegions || bytes.size() != kHeader + std::size_t{n} * kRegionBytes)
    throw InvalidArgumentError("a KV layout of " + std::to_string(n) + " regions cannot be " +
                               std::to_string(bytes.size()) + " bytes long");
  std::vector<KvRegion> regions(n);
  const std::byte* p = bytes.data() + kHeader;
  for (KvRegion& g : regions) {
    const std::uint64_t v[4] = {detail::load_le64(p), detail::load_le64(p + 8), detail::load_le64(p + 16),
                                detail::load_le64(p + 24)};
    g = KvRegion{v[0], v[1], v[2], v[3]};
    p += kRegionBytes;
  }
  return KvLayout(std::move(regions));  // the constructor's checks hold for a peer's layout too
}

std::vector<Segment> KvLayout::segments_to(const KvLayout& remote, std::span<const std::uint64_t> local_ids,
                                           std::span<const std::uint64_t> remote_ids, const char* local_name,
                                           const char* remote_name) const {
  if (local_ids.size() != remote_ids.size())
    throw InvalidArgumentError(std::string(local_name) + " has " + std::to_string(local_ids.size()) + " blocks and " +
                               remote_name + " " + std::to_string(remote_ids.size()) + ": they pair up one to one");
  if (regions_.size() != remote.regions_.size())
    throw InvalidArgumentError("the local KV layout has " + std::to_string(regions_.size()) +
                               " regions and the remote one " + std::to_string(remote.regions_.size()));
  for (std::size_t r = 0; r < regions_.size(); ++r)
    if (regions_[r].block_bytes != remote.regions_[r].block_bytes)
      throw InvalidArgumentError(region_name(r) + " has blocks of " + std::to_string(regions_[r].block_bytes) +
                                 " bytes here and " + std::to_string(remote.regions_[r].block_bytes) + " at the peer");
  check_ids(regions_, local_ids, local_name, "local");
  check_ids(remote.regions_, remote_ids, remote_name, "remote");
  std::vector<Segment> out;
  out.reserve(regions_.size() * local_ids.size());
  for (std::size_t r = 0; r < regions_.size(); ++r) {
    const KvRegion& l = regions_[r];
    const KvRegion& d = remote.regions_[r];
    for (std::size_t i = 0; i < local_ids.size(); ++i)
      out.push_back(Segment{l.offset + local_ids[i] * l.stride, d.offset + remote_ids[i] * d.stride, l.block_bytes});
  }
  return out;
}

bool KvLayout::operator==(const KvLayout& other) const noexcept {
  return std::equal(regions_.begin(), regions_.end(), other.regions_.begin(), other.regions_.end(),
                    [](const KvRegion& a, const KvRegion& b) {
                      return a.offset == b.offset && a.block_bytes == b.block_bytes && a.block_count == b.block_count &&
                             a.stride == b.stride;
                    });
}

}  // namespace hmc
