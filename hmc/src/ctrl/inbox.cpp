// Each peer's inbox of received messages, bounded per peer and over all peers.
#include "ctrl/ctrl_channel_impl.hpp"

#include <algorithm>

namespace hmc::detail {

namespace {

constexpr std::size_t kMessageOverhead = 64;  // inbox cost of a message beyond its payload

}  // namespace

std::size_t inbox_cost(const CtrlMessage& m) { return m.bytes().size() + kMessageOverhead; }

void CtrlChannelImpl::push_message(const std::shared_ptr<Peer>& p, CtrlMessage m) {
  if (m.kind() == CtrlKind::tag && p->notify_waits.offer(m.tag())) return;
  const std::size_t cost = inbox_cost(m);
  p->inbox_bytes += cost;
  *inbox_total += cost;
  p->inbox.push(std::move(m));
  if (p->conn && holds_more_than(*p, 1)) p->conn->pause_reading();
}

// Over its own budget, or, while all inboxes together are over theirs, over an even share of
// it: a peer whose messages are being received keeps flowing while the hoarders wait. `fraction`
// 2 asks the same of half the budgets (where reading resumes).
bool CtrlChannelImpl::holds_more_than(const Peer& p, std::size_t fraction) const {
  if (p.inbox_bytes > opts.inbox_budget / fraction) return true;
  const std::size_t share = opts.total_inbox_budget / std::max<std::size_t>(1, peers.size());
  return *inbox_total > opts.total_inbox_budget / fraction && p.inbox_bytes > share / fraction;
}

// After a receive took `cost` bytes from p's inbox.
void CtrlChannelImpl::drained(Peer& p, std::size_t cost) {
  const bool total_was_over = *inbox_total > opts.total_inbox_budget / 2;
  p.inbox_bytes -= std::min(p.inbox_bytes, cost);
  *inbox_total -= std::min(*inbox_total, cost);
  if (p.conn && !holds_more_than(p, 2)) p.conn->resume_reading();
  if (!total_was_over || *inbox_total > opts.total_inbox_budget / 2) return;
  // The total fell to half: peers paused for their share only may read again.
  for (const auto& [rank, other] : peers)
    if (other->conn && !holds_more_than(*other, 2)) other->conn->resume_reading();
}

std::shared_ptr<CtrlChannelImpl::Peer> CtrlChannelImpl::new_peer() { return std::make_shared<Peer>(ex, inbox_total); }

}  // namespace hmc::detail
