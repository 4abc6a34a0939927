#pragma once
// A paged KV cache as a session buffer holds it, so that transfers name blocks instead of offsets.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "hmc/segment.hpp"

namespace hmc {

// One tensor's pages (for example the K cache of one layer): block i is the block_bytes bytes at
// offset + i * stride of the session buffer. stride > block_bytes skips what lies between blocks
// (a tensor that interleaves K and V); stride 0 means block_bytes.
struct KvRegion {
  std::size_t offset = 0;
  std::size_t block_bytes = 0;
  std::size_t block_count = 0;
  std::size_t stride = 0;
};

class KvLayout {
 public:
  // At most this many regions (a 128-layer model with K and V per layer uses 256).
  static constexpr std::size_t kMaxRegions = 1u << 16;

  // InvalidArgumentError naming the region when one is empty, has no blocks, a stride shorter than
  // its blocks, or ends past the address space.
  explicit KvLayout(std::vector<KvRegion> regions);

  const std::vector<KvRegion>& regions() const noexcept { return regions_; }
  // One past the last byte any block of the layout covers.
  std::size_t end() const noexcept { return end_; }

  // A fixed little-endian form for the peer (ctrl_send, a store); from_bytes refuses anything
  // else with InvalidArgumentError, as it reads bytes a peer sent.
  std::vector<std::byte> to_bytes() const;
  static KvLayout from_bytes(std::span<const std::byte> bytes);

  // The segments (local_offset, remote_offset, size) pairing block local_ids[i] of this layout with
  // block remote_ids[i] of `remote`, in every region, region by region. InvalidArgumentError naming
  // the first id past its layout's blocks (by the caller's names for the two lists), or when the
  // layouts' regions, their block sizes or the id counts differ.
  std::vector<Segment> segments_to(const KvLayout& remote, std::span<const std::uint64_t> local_ids,
                                   std::span<const std::uint64_t> remote_ids, const char* local_name = "local_ids",
                                   const char* remote_name = "remote_ids") const;

  bool operator==(const KvLayout& other) const noexcept;

 private:
  std::vector<KvRegion> regions_;
  std::size_t end_ = 0;
};

}  // namespace hmc
