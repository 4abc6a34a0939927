#pragma once
// One contiguous piece of a batch transfer between the local and a peer's buffer.
#include <cstddef>

namespace hmc {

struct Segment {
  std::size_t local_offset = 0;
  std::size_t remote_offset = 0;
  std::size_t size = 0;
};

}  // namespace hmc
