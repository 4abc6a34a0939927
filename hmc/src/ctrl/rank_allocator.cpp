// The ranks a server hands to clients that connect without one.
#include "ctrl/ctrl_channel_impl.hpp"

namespace hmc::detail {

bool CtrlChannelImpl::rank_in_use(std::uint32_t rank) const { return alive(rank) || reserved.count(rank) != 0; }

// Ranks handed to "any" clients: 1, 2, ... in connection order, skipping ranks in use.
std::uint32_t CtrlChannelImpl::assign_rank() {
  while (next_assign == self_rank.load() || next_assign == kAnyRank || rank_in_use(next_assign)) ++next_assign;
  return next_assign++;
}

}  // namespace hmc::detail
