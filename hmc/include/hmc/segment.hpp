#pragma once
// One contiguous piece of a batch transfer between the local and a peer's buffer.
#include <cstddef>
#include <vector>

namespace hmc {

struct Segment {
  std::size_t local_offset = 0;
  std::size_t remote_offset = 0;
  std::size_t size = 0;
};

// Merges each run of segments that continue one another on both sides into one, in place and in
// order (a KV block table's neighbouring blocks become one transfer). Empty segments stay apart, so
// that the batch's checks still refuse them.
void coalesce(std::vector<Segment>& segments) noexcept;

}  // namespace hmc
