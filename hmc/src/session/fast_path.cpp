// Control messages over the data transport once a peer's SWITCH says so (docs/session.md).
#include "session/session_impl.hpp"

#include <algorithm>

#include "peer_log.hpp"
#include "transport/fast_message.hpp"

namespace hmc::detail {

// `rank` is who the transport identified by its secret, never what the message claims.
void SessionImpl::fast_message(std::uint32_t rank, std::span<const std::byte> bytes) {
  if (!ctrl) return;
  std::optional<CtrlMessage> m = decode_fast_message(bytes, opts.ctrl.max_frame_length);
  if (!m) {
    log().error("rank {} sent a malformed fast-path control message; disconnecting it", rank);
    return peer_down(rank, "it sent a malformed fast-path control message and was disconnected");
  }
  ++fast_received[rank];
  if (fast_recv.count(rank) != 0) {
    if (!ctrl->deliver(rank, std::move(*m))) return outran(rank);
  } else {
    // Held until the SWITCH: bounded per peer and over all peers, in messages and in bytes.
    Early& e = fast_early[rank];
    const std::size_t size = m->bytes().size();
    if (e.messages.size() >= kMaxEarly || e.bytes + size > opts.ctrl.inbox_budget ||
        early_bytes + size > opts.ctrl.total_inbox_budget) {
      log().error("rank {} sent over {} fast-path messages or {} bytes before its SWITCH; disconnecting it{}", rank,
                  kMaxEarly, opts.ctrl.inbox_budget, peer_fields(rank, "ctrl_recv", Status::PROTOCOL_ERROR));
      return peer_down(rank, "it sent too many fast-path messages before its SWITCH and was disconnected");
    }
    e.bytes += size;
    early_bytes += size;
    e.messages.push_back(std::move(*m));
  }
  if (departing.count(rank) != 0) depart_when_ready(rank);
}

void SessionImpl::fast_switch(std::uint32_t rank) {
  fast_recv.insert(rank);
  auto early = take_early(rank);
  for (auto& m : early)
    if (!ctrl->deliver(rank, std::move(m))) return outran(rank);
}

std::vector<CtrlMessage> SessionImpl::take_early(std::uint32_t rank) {
  auto it = fast_early.find(rank);
  if (it == fast_early.end()) return {};
  early_bytes -= std::min(early_bytes, it->second.bytes);
  std::vector<CtrlMessage> out = std::move(it->second.messages);
  fast_early.erase(it);
  return out;
}

// The fast path cannot be paused as the socket can: a sender that keeps it full is cut off.
void SessionImpl::outran(std::uint32_t rank) {
  log().error("rank {}'s fast-path control messages outran ctrl_recv by twice the inbox budget; disconnecting it{}",
              rank, peer_fields(rank, "ctrl_recv", Status::PROTOCOL_ERROR));
  peer_down(rank, "its control messages outran ctrl_recv by twice the inbox budget (CtrlOptions::inbox_budget, "
                  "total_inbox_budget) and it was disconnected");
}

}  // namespace hmc::detail
