// all_gather and all_to_all: every rank reads a contribution (or a block) from every other.
#include <cstring>

#include "world/collective_steps.hpp"

namespace hmc::detail {

using namespace collective;
using Kind = CollectiveCall::Kind;

// all_gather (every peer reads the same contribution) and all_to_all (a block per peer), with
// equal sizes (into c.out) or any sizes (into r.blocks). Once a round's destinations are known
// (always with equal sizes; from round 1 otherwise) each get starts as its notice arrives.
asio::awaitable<void> WorldImpl::exchange(CollectiveCall& c, CollectiveResult& r, time_point deadline) {
  const bool gathers = c.kind == Kind::all_gather || c.kind == Kind::all_gather_v;
  const bool equal = c.kind == Kind::all_gather || c.kind == Kind::all_to_all;
  const std::size_t n = size;
  const char* name = gathers ? "all_gather" : "all_to_all";
  std::vector<std::span<const std::byte>> blocks;  // what rank d reads from this rank
  std::size_t each = 0;                            // equal sizes: every contribution's size
  if (gathers) {
    blocks.assign(n, c.in);
    each = c.in.size();
    if (equal && c.out.size() != each * n)
      throw Fault{Status::INVALID_ARGUMENT, rank,
                  "out has " + std::to_string(c.out.size()) +
                      " bytes, expected size() * in.size() = " + std::to_string(each * n)};
  } else if (equal) {
    if (c.in.size() % n != 0 || c.out.size() != c.in.size())
      throw Fault{Status::INVALID_ARGUMENT, rank,
                  "in and out must both hold size() equal blocks (in " + std::to_string(c.in.size()) + ", out " +
                      std::to_string(c.out.size()) + " bytes)"};
    each = c.in.size() / n;
    for (std::size_t d = 0; d < n; ++d) blocks.push_back(c.in.subspan(d * each, each));
  } else {
    if (c.blocks.size() != n)
      throw Fault{Status::INVALID_ARGUMENT, rank,
                  std::to_string(c.blocks.size()) + " blocks for a world of " + std::to_string(n)};
    blocks = c.blocks;
  }
  const auto peers = others();
  co_await ensure(peers, deadline);
  auto idx = [this](std::uint32_t p) -> std::size_t { return p < rank ? p : p - 1; };
  // Round layout in this rank's half: what it publishes (one piece, or one per peer), then one
  // staging slot per peer.
  const std::size_t piece = gathers ? align_down(half() / n) : n > 1 ? align_down(half() / (2 * (n - 1))) : kAlign;
  if (piece == 0) throw Fault{Status::INVALID_CONFIG, rank, "the session buffer is too small for this world"};
  const std::size_t staging = gathers ? piece : piece * (n - 1);
  auto out_slot = [&](std::uint32_t d) { return gathers ? std::size_t{0} : piece * idx(d); };
  std::uint64_t my_largest = 0;
  for (auto d : peers) my_largest = std::max<std::uint64_t>(my_largest, blocks[d].size());

  struct Dest {
    std::vector<std::uint64_t> totals;
    std::vector<std::byte*> at;
    Landing land;
  };
  auto dst = std::make_shared<Dest>();
  dst->totals.assign(n, each);
  dst->totals[rank] = blocks[rank].size();
  auto place = [&](std::span<std::byte> all) {
    for (std::size_t p = 0, off = 0; p < n; off += static_cast<std::size_t>(dst->totals[p]), ++p)
      dst->at.push_back(all.data() + off);
    if (!blocks[rank].empty()) std::memmove(dst->at[rank], blocks[rank].data(), blocks[rank].size());
    dst->land.prepare(session, all);
  };
  if (equal) place(c.out);
  std::size_t rounds = equal ? rounds_for(gathers ? each : (n > 1 ? each : 0), piece) : 1;

  for (std::size_t j = 0; j < rounds; ++j) {
    const std::uint64_t s = seq_++;
    const std::size_t base = region(s);
    auto b = batch();
    for (auto d : peers) {
      const auto [off, len] = slice(blocks[d].size(), j, piece);
      const bool small = len <= kMaxInline;  // small pieces travel inside the notice
      if (len != 0 && !small && (!gathers || d == peers.front()))
        session.buffer().write_from_cpu(blocks[d].data() + off, len, base + out_slot(d));
      send(b, d,
           WorldMessage{WorldKind::notice, small ? kInline : std::uint8_t{0}, 0, s, base + out_slot(d), len,
                        blocks[d].size(), gathers ? blocks[d].size() : my_largest},
           small ? blocks[d].subspan(off, len) : std::span<const std::byte>{});
    }
    auto got = std::make_shared<std::vector<WorldMessage>>(n);
    auto g = batch();
    auto slot_of = [base, staging, piece, idx](std::uint32_t p) { return base + staging + piece * idx(p); };
    if (!dst->at.empty()) {
      // Destinations known: validate each notice and start its get at once.
      for (auto p : peers)
        expect(b, p, WorldKind::notice, s, 0, deadline,
               [self = shared_from_this(), dst, got, g, p, j, piece, slot = slot_of(p), equal, name](
                   const WorldMessage& m, std::span<const std::byte> inline_piece) {
                 const auto [o, expected] = slice(dst->totals[p], j, piece);
                 if (equal && m.c != dst->totals[p])
                   throw Fault{Status::INVALID_ARGUMENT, p,
                               rank_name(p) + " contributed " + std::to_string(m.c) + " bytes, this rank expects " +
                                   std::to_string(dst->totals[p]) + " (" + name + " needs equal sizes)"};
                 if (m.b != expected)
                   throw Fault{Status::PROTOCOL_ERROR, p,
                               rank_name(p) + " announced a piece of " + std::to_string(m.b) + " bytes, expected " +
                                   std::to_string(expected)};
                 (*got)[p] = m;
                 if (m.reason == kInline) {
                   if (expected != 0) std::memcpy(dst->at[p] + o, inline_piece.data(), expected);
                 } else {
                   dst->land.get(*self, g, p, dst->at[p] + o, slot, m.a, expected);
                 }
               });
      // A failed notice may leave gets of this round in flight: they finish before the error returns.
      std::optional<Fault> failed;
      try {
        co_await b->wait();
      } catch (const Fault& f) {
        failed = f;
      }
      if (failed) {
        co_await g->drain(settle_by());
        throw *failed;
      }
    } else {
      // Round 0 of the _v forms: sizes first, then the destinations, then the gets.
      auto pieces = std::make_shared<std::vector<std::vector<std::byte>>>(n);
      for (auto p : peers) expect(b, p, WorldKind::notice, s, 0, deadline, keep(got, pieces, p));
      co_await b->wait();
      std::uint64_t largest = gathers ? blocks[rank].size() : my_largest;
      for (auto p : peers) {
        const auto& m = (*got)[p];
        if (m.c > kMaxContribution || m.d > kMaxContribution || m.d < m.c)
          throw Fault{Status::PROTOCOL_ERROR, p, rank_name(p) + " announced inconsistent sizes"};
        dst->totals[p] = m.c;
        largest = std::max(largest, m.d);
      }
      rounds = rounds_for(largest, piece);
      auto& blk = r.blocks;
      blk.offsets.assign(n + 1, 0);
      for (std::size_t p = 0; p < n; ++p)
        blk.offsets[p + 1] = blk.offsets[p] + static_cast<std::size_t>(dst->totals[p]);
      blk.data.resize(blk.offsets[n]);
      place(blk.data);
      for (auto p : peers) {
        const auto [o, expected] = slice(dst->totals[p], j, piece);
        const auto& m = (*got)[p];
        if (m.b != expected)
          throw Fault{Status::PROTOCOL_ERROR, p,
                      rank_name(p) + " announced a piece of " + std::to_string(m.b) + " bytes, expected " +
                          std::to_string(expected)};
        if (m.reason == kInline) {
          if (expected != 0) std::memcpy(dst->at[p] + o, (*pieces)[p].data(), expected);
        } else {
          dst->land.get(*this, g, p, dst->at[p] + o, slot_of(p), m.a, expected);
        }
      }
    }
    co_await g->wait_settled(settle_by());
    for (auto p : peers)
      if (const auto [o, l] = slice(dst->totals[p], j, piece); l != 0 && (*got)[p].reason != kInline)
        dst->land.finish(session, dst->at[p] + o, slot_of(p), l);
  }
}

}  // namespace hmc::detail
