#pragma once
// A transport's connected peers by rank, each owned until it is taken out to be torn down. Peer is
// the transport's own per-peer state; it has a PeerRecord `record`.
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "transport/transport.hpp"

namespace hmc::detail {

template <class Peer>
class PeerTable {
 public:
  bool contains(std::uint32_t rank) const { return peers_.count(rank) != 0; }
  bool empty() const noexcept { return peers_.empty(); }

  Peer* find(std::uint32_t rank) const {
    auto it = peers_.find(rank);
    return it == peers_.end() ? nullptr : it->second.get();
  }
  const PeerRecord* record(std::uint32_t rank) const {
    const Peer* p = find(rank);
    return p == nullptr ? nullptr : &p->record;
  }
  std::vector<std::uint32_t> ranks() const {
    std::vector<std::uint32_t> out;
    out.reserve(peers_.size());
    for (const auto& [rank, p] : peers_) out.push_back(rank);
    return out;
  }

  // Replaces any peer of that rank (callers refuse a connected rank first).
  Peer& add(std::uint32_t rank, std::unique_ptr<Peer> p) {
    auto& slot = peers_[rank];
    slot = std::move(p);
    return *slot;
  }
  // The rank's peer, default-made when it has none (a peer whose connections arrive before it is added).
  Peer& find_or_add(std::uint32_t rank) {
    auto& slot = peers_[rank];
    if (slot == nullptr) slot = std::make_unique<Peer>();
    return *slot;
  }
  // Out of the table, to be torn down; null when the rank has none.
  std::unique_ptr<Peer> take(std::uint32_t rank) {
    auto it = peers_.find(rank);
    if (it == peers_.end()) return nullptr;
    std::unique_ptr<Peer> p = std::move(it->second);
    peers_.erase(it);
    return p;
  }

  // (rank, unique_ptr<Peer>) in rank order; no adding or taking while iterating.
  auto begin() const { return peers_.begin(); }
  auto end() const { return peers_.end(); }

 private:
  std::map<std::uint32_t, std::unique_ptr<Peer>> peers_;
};

}  // namespace hmc::detail
