// all_reduce: one hop for small vectors, reduce-scatter then all-gather for large ones.
#include <cstring>

#include "world/collective_steps.hpp"
#include "world/reduce.hpp"

namespace hmc::detail {

using namespace collective;
using Kind = CollectiveCall::Kind;

asio::awaitable<void> WorldImpl::all_reduce(CollectiveCall& c, time_point deadline) {
  const std::size_t n = size;
  const std::size_t es = size_of(c.dtype);
  if (c.in.size() % es != 0 || c.out.size() != c.in.size())
    throw Fault{Status::INVALID_ARGUMENT, rank,
                "in and out must hold the same whole number of " + std::string(to_string(c.dtype)) + " elements"};
  const std::size_t count = c.in.size() / es;
  const std::uint64_t kind = static_cast<std::uint64_t>(c.dtype) << 8 | static_cast<std::uint64_t>(c.op);
  if (n == 1) {
    if (c.out.data() != c.in.data()) std::memmove(c.out.data(), c.in.data(), c.in.size());
    co_return;
  }
  const auto peers = others();
  co_await ensure(peers, deadline);
  std::byte* const buf = static_cast<std::byte*>(session.buffer().data());
  // Every rank must reduce the same number of bytes of the same type with the same op.
  auto check = [bytes = c.in.size(), kind](std::uint32_t p, const WorldMessage& m) {
    if (m.c != bytes || m.d != kind)
      throw Fault{Status::INVALID_ARGUMENT, p,
                  rank_name(p) + " reduces " + std::to_string(m.c) + " bytes (type/op " + std::to_string(m.d) +
                      "), this rank " + std::to_string(bytes) + " bytes (type/op " + std::to_string(kind) + ")"};
  };
  auto slot = [&](std::uint32_t p) { return p < rank ? p : p - 1; };
  // Round s: tells every peer where this rank's `nbytes` of input lie and collects theirs, checked.
  auto announce = [&](std::uint64_t s, std::size_t base, std::size_t nbytes) {
    auto got = std::make_shared<std::vector<WorldMessage>>(n);
    auto b = batch();
    for (auto p : peers) send(b, p, WorldMessage{WorldKind::notice, 0, 0, s, base, nbytes, c.in.size(), kind});
    for (auto p : peers)
      expect(b, p, WorldKind::notice, s, 0, deadline,
             [got, p, check](const WorldMessage& m, std::span<const std::byte>) {
               check(p, m);
               (*got)[p] = m;
             });
    return std::pair{b, got};
  };

  if (c.in.size() <= kDirectReduce && align_up(c.in.size()) * (n + 1) <= half()) {
    // Small: every rank gets every input and reduces the whole array, in rank order (same bits everywhere).
    const std::size_t stride = align_up(c.in.size());
    const std::uint64_t s = seq_++;
    const std::size_t base = region(s);
    session.buffer().write_from_cpu(c.in.data(), c.in.size(), base);
    auto [b, got] = announce(s, base, c.in.size());
    co_await b->wait();
    auto g = batch();
    for (auto p : peers) get(g, p, base + stride * (1 + slot(p)), (*got)[p].a, c.in.size());
    co_await g->wait();
    auto input = [&](std::uint32_t p) -> const std::byte* {
      return p == rank ? buf + base : buf + base + stride * (1 + slot(p));
    };
    // Accumulate beside the inputs: out may alias in.
    std::byte* acc = buf + base + stride * n;
    std::memcpy(acc, input(0), c.in.size());
    for (std::uint32_t p = 1; p < n; ++p) reduce_into(acc, input(p), count, c.dtype, c.op);
    std::memcpy(c.out.data(), acc, c.in.size());
    co_return;
  }

  // Large: reduce-scatter then all-gather, in rounds of `slice_count` elements. Round layout: the
  // slice, this rank's reduced chunk, one staging slot per peer (chunks, then reduced chunks).
  const std::size_t slice_count = (half() - n * (es + 2 * kAlign) - 2 * kAlign) / 2 / es;
  if (slice_count < n) throw Fault{Status::INVALID_CONFIG, rank, "the session buffer is too small for this world"};
  for (std::size_t done = 0; done < count;) {
    const std::size_t sc = std::min(slice_count, count - done);
    auto chunk_begin = [&](std::size_t i) { return sc * i / n; };
    auto chunk_bytes = [&](std::size_t i) { return (chunk_begin(i + 1) - chunk_begin(i)) * es; };
    const std::size_t slice_bytes = sc * es;
    const std::size_t cmax = align_up((sc + n - 1) / n * es);
    const std::uint64_t s = seq_++;
    const std::size_t base = region(s);
    const std::size_t reduced = base + align_up(slice_bytes);
    auto staged = [&](std::uint32_t p) { return reduced + cmax * (1 + slot(p)); };
    const std::byte* in = c.in.data() + done * es;
    session.buffer().write_from_cpu(in, slice_bytes, base);
    auto [b, got] = announce(s, base, slice_bytes);
    co_await b->wait();
    const std::size_t mine_off = chunk_begin(rank) * es;
    const std::size_t mine_len = chunk_bytes(rank);
    auto g = batch();
    for (auto p : peers) {
      if ((*got)[p].b != slice_bytes)
        throw Fault{Status::PROTOCOL_ERROR, p, rank_name(p) + " announced a slice of the wrong size"};
      get(g, p, staged(p), (*got)[p].a + mine_off, mine_len);
    }
    co_await g->wait();
    auto part = [&](std::uint32_t p) -> const std::byte* {
      return p == rank ? buf + base + mine_off : buf + staged(p);
    };
    std::memcpy(buf + reduced, part(0), mine_len);
    for (std::uint32_t p = 1; p < n; ++p) reduce_into(buf + reduced, part(p), mine_len / es, c.dtype, c.op);
    // All-gather of the reduced chunks.
    auto got2 = std::make_shared<std::vector<WorldMessage>>(n);
    auto b2 = batch();
    for (auto p : peers) send(b2, p, WorldMessage{WorldKind::notice, 0, 1, s, reduced, mine_len, c.in.size(), kind});
    for (auto p : peers)
      expect(b2, p, WorldKind::notice, s, 1, deadline,
             [got2, p](const WorldMessage& m, std::span<const std::byte>) { (*got2)[p] = m; });
    co_await b2->wait();
    auto g2 = batch();
    for (auto p : peers) {
      if ((*got2)[p].b != chunk_bytes(p))
        throw Fault{Status::PROTOCOL_ERROR, p, rank_name(p) + " announced a chunk of the wrong size"};
      get(g2, p, staged(p), (*got2)[p].a, chunk_bytes(p));
    }
    co_await g2->wait();
    std::byte* out = c.out.data() + done * es;
    for (std::uint32_t p = 0; p < n; ++p) {
      const std::size_t at = chunk_begin(p) * es;
      if (p == rank) {
        std::memcpy(out + at, buf + reduced, mine_len);
      } else if (chunk_bytes(p) != 0) {
        std::memcpy(out + at, buf + staged(p), chunk_bytes(p));
      }
    }
    done += sc;
  }
}

}  // namespace hmc::detail
