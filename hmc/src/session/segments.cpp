#include <limits>

#include "hmc/segment.hpp"

namespace hmc {

void coalesce(std::vector<Segment>& segments) noexcept {
  if (segments.size() < 2) return;
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  std::size_t out = 0;
  for (std::size_t i = 1; i < segments.size(); ++i) {
    Segment& last = segments[out];
    const Segment& next = segments[i];
    // Ends that would wrap are never adjacent: the checks then see both segments as they were.
    const bool adjacent = last.size != 0 && next.size != 0 && last.size <= kMax - last.local_offset &&
                          last.size <= kMax - last.remote_offset && next.size <= kMax - next.local_offset &&
                          next.size <= kMax - next.remote_offset &&
                          last.local_offset + last.size == next.local_offset &&
                          last.remote_offset + last.size == next.remote_offset;
    if (adjacent) {
      last.size += next.size;
    } else {
      segments[++out] = next;
    }
  }
  segments.resize(out + 1);
}

}  // namespace hmc
