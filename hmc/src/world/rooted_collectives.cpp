// The collectives with a root: broadcast, gather and scatter.
#include <cstring>

#include "world/collective_steps.hpp"

namespace hmc::detail {

using namespace collective;
using Kind = CollectiveCall::Kind;

asio::awaitable<void> WorldImpl::broadcast(CollectiveCall& c, CollectiveResult& r, time_point deadline) {
  const bool root = rank == c.root;
  if (root) r.bytes = c.data;
  if (size == 1) co_return;
  const auto peers = root ? others() : std::vector<std::uint32_t>{c.root};
  co_await ensure(peers, deadline);
  const std::size_t piece = half();
  std::uint64_t total = root ? c.data.size() : 0;
  std::size_t rounds = root ? rounds_for(total, piece) : 1;
  for (std::size_t j = 0; j < rounds; ++j) {
    const std::uint64_t s = seq_++;
    const std::size_t base = region(s);
    if (root) {
      auto b = batch();
      const auto [off, len] = slice(total, j, piece);
      if (len != 0) session.buffer().write_from_cpu(c.data.data() + off, len, base);
      // Everyone entered the round (their readiness) before anyone learns it may read.
      for (auto p : peers) expect(b, p, WorldKind::ready, s, 0, deadline, {});
      co_await b->wait();
      auto n = batch();
      for (auto p : peers) send(n, p, WorldMessage{WorldKind::notice, 0, 1, s, base, len, total, rounds});
      co_await n->wait();
      continue;
    }
    co_await root_piece(c.root, RootRound{s, base, j, piece, true}, total, rounds, r.bytes, deadline);
  }
}

asio::awaitable<void> WorldImpl::gather(CollectiveCall& c, CollectiveResult& r, time_point deadline) {
  const bool root = rank == c.root;
  const std::size_t n = size;
  const std::size_t mine = c.in.size();
  if (root) {
    r.blocks.offsets.assign(n + 1, 0);
    r.blocks.offsets[n] = mine;
  }
  if (n == 1) {
    r.blocks.data.assign(c.in.begin(), c.in.end());
    co_return;
  }
  const auto peers = root ? others() : std::vector<std::uint32_t>{c.root};
  co_await ensure(peers, deadline);
  const std::size_t piece = align_down(half() / (n - 1));
  if (piece == 0) throw Fault{Status::INVALID_CONFIG, rank, "the session buffer is too small for this world"};
  auto slot = [&](std::uint32_t p) { return piece * (p < rank ? p : p - 1); };
  std::vector<std::uint64_t> totals(n, 0);
  totals[rank] = mine;
  std::size_t rounds = 1;
  for (std::size_t j = 0; j < rounds; ++j) {
    const std::uint64_t s = seq_++;
    const std::size_t base = region(s);
    auto b = batch();
    if (!root) {
      const auto [off, len] = slice(mine, j, piece);
      if (len != 0) session.buffer().write_from_cpu(c.in.data() + off, len, base);
      auto release = std::make_shared<WorldMessage>();
      send(b, c.root, WorldMessage{WorldKind::notice, 0, 0, s, base, len, mine, 0});
      // The root is done reading this round (and everyone entered it) when it releases us.
      expect(b, c.root, WorldKind::release, s, 1, deadline,
             [release](const WorldMessage& m, std::span<const std::byte>) { *release = m; });
      co_await b->wait();
      if (j == 0) {
        if (release->c == 0 || release->c > kMaxContribution)
          throw root_announced(c.root, std::to_string(release->c) + " rounds");
        rounds = static_cast<std::size_t>(release->c);
      }
      continue;
    }
    auto got = std::make_shared<std::vector<WorldMessage>>(n);
    for (auto p : peers)
      expect(b, p, WorldKind::notice, s, 0, deadline,
             [got, p](const WorldMessage& m, std::span<const std::byte>) { (*got)[p] = m; });
    co_await b->wait();
    if (j == 0) {
      std::uint64_t largest = mine;
      for (auto p : peers) {
        totals[p] = (*got)[p].c;
        if (totals[p] > kMaxContribution)
          throw Fault{Status::PROTOCOL_ERROR, p, rank_name(p) + " claims " + std::to_string(totals[p]) + " bytes"};
        largest = std::max(largest, totals[p]);
      }
      rounds = rounds_for(largest, piece);
      auto& blk = r.blocks;
      for (std::size_t p = 0; p < n; ++p) blk.offsets[p + 1] = blk.offsets[p] + static_cast<std::size_t>(totals[p]);
      blk.data.resize(blk.offsets[n]);
      if (mine != 0) std::memcpy(blk.data.data() + blk.offsets[rank], c.in.data(), mine);
    }
    auto g = batch();
    for (auto p : peers) {
      const auto expected = slice(totals[p], j, piece).second;
      if ((*got)[p].b != expected)
        throw Fault{Status::PROTOCOL_ERROR, p, rank_name(p) + " announced a piece of the wrong size"};
      get(g, p, base + slot(p), (*got)[p].a, expected);
    }
    co_await g->wait();
    for (auto p : peers)
      if (const auto [o, l] = slice(totals[p], j, piece); l != 0)
        session.buffer().read_to_cpu(r.blocks.data.data() + r.blocks.offsets[p] + o, l, base + slot(p));
    auto rel = batch();
    for (auto p : peers) send(rel, p, WorldMessage{WorldKind::release, 0, 1, s, 0, 0, rounds, 0});
    co_await rel->wait();
  }
}

asio::awaitable<void> WorldImpl::scatter(CollectiveCall& c, CollectiveResult& r, time_point deadline) {
  const bool root = rank == c.root;
  const std::size_t n = size;
  if (root && c.blocks.size() != n)
    throw Fault{Status::INVALID_ARGUMENT, rank,
                std::to_string(c.blocks.size()) + " blocks for a world of " + std::to_string(n)};
  if (root) r.bytes.assign(c.blocks[rank].begin(), c.blocks[rank].end());
  if (n == 1) co_return;
  const auto peers = root ? others() : std::vector<std::uint32_t>{c.root};
  co_await ensure(peers, deadline);
  const std::size_t piece = align_down(half() / (n - 1));
  if (piece == 0) throw Fault{Status::INVALID_CONFIG, rank, "the session buffer is too small for this world"};
  auto slot = [&](std::uint32_t p) { return piece * (p < rank ? p : p - 1); };
  std::uint64_t total = 0;
  std::size_t rounds = 1;
  if (root) {
    std::uint64_t largest = 0;
    for (auto d : peers) largest = std::max<std::uint64_t>(largest, c.blocks[d].size());
    rounds = rounds_for(largest, piece);
  }
  for (std::size_t j = 0; j < rounds; ++j) {
    const std::uint64_t s = seq_++;
    const std::size_t base = region(s);
    if (root) {
      auto b = batch();
      for (auto d : peers)
        if (const auto [off, len] = slice(c.blocks[d].size(), j, piece); len != 0)
          session.buffer().write_from_cpu(c.blocks[d].data() + off, len, base + slot(d));
      for (auto p : peers) expect(b, p, WorldKind::ready, s, 0, deadline, {});
      co_await b->wait();
      auto nb = batch();
      for (auto d : peers)
        send(nb, d,
             WorldMessage{WorldKind::notice, 0, 1, s, base + slot(d), slice(c.blocks[d].size(), j, piece).second,
                          c.blocks[d].size(), rounds});
      co_await nb->wait();
      continue;
    }
    co_await root_piece(c.root, RootRound{s, base, j, piece, false}, total, rounds, r.bytes, deadline);
  }
}

asio::awaitable<void> WorldImpl::root_piece(std::uint32_t root, RootRound at, std::uint64_t& total, std::size_t& rounds,
                                            std::vector<std::byte>& out, time_point deadline) {
  auto b = batch();
  auto got = std::make_shared<WorldMessage>();
  send(b, root, WorldMessage{WorldKind::ready, 0, 0, at.seq, 0, 0, 0, 0});
  expect(b, root, WorldKind::notice, at.seq, 1, deadline,
         [got](const WorldMessage& m, std::span<const std::byte>) { *got = m; });
  co_await b->wait();
  if (at.j == 0) {
    total = got->c;
    const std::size_t least = rounds_for(total, at.piece);
    const bool consistent = at.exact_rounds ? got->d == least : got->d >= least && got->d <= kMaxContribution;
    if (total > kMaxContribution || got->d == 0 || !consistent)
      throw root_announced(
          root, "inconsistent sizes (" + std::to_string(total) + " bytes in " + std::to_string(got->d) + " rounds)");
    rounds = static_cast<std::size_t>(got->d);
    out.clear();
  }
  const auto [off, len] = slice(total, at.j, at.piece);
  if (got->b != len) throw root_announced(root, "a piece of the wrong size");
  auto g = batch();
  get(g, root, at.base, got->a, len);
  co_await g->wait();
  // Grown by what arrived, not by the announced total: a root that claims 20 GiB and sends
  // nothing costs nothing.
  out.resize(off + len);
  if (len != 0) session.buffer().read_to_cpu(out.data() + off, len, at.base);
}

}  // namespace hmc::detail
