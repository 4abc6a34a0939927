// The collectives (barrier, all_gather / all_to_all, broadcast, gather, scatter, all_reduce) and the
// messages and gets their steps are made of.
#include "world/world_impl.hpp"

#include <algorithm>
#include <cstring>

#include "hmc/error.hpp"
#include "hmc/runtime/deadline.hpp"
#include "hmc/runtime/log.hpp"
#include "world/batch.hpp"
#include "world/reduce.hpp"

namespace hmc::detail {

using Kind = CollectiveCall::Kind;
using std::chrono::milliseconds;

namespace {

constexpr std::size_t kAlign = 64;
constexpr std::uint64_t kMaxContribution = std::uint64_t{1} << 40;  // a peer's claimed size beyond this is hostile
constexpr std::size_t kDirectReduce = std::size_t{64} << 10;        // all_reduce of at most this: one hop
constexpr std::size_t kDirectGet = std::size_t{256} << 10;          // results this large are registered

std::size_t align_down(std::size_t x) { return x & ~(kAlign - 1); }
std::size_t align_up(std::size_t x) { return (x + kAlign - 1) & ~(kAlign - 1); }

milliseconds left(time_point deadline) {
  const auto now = std::chrono::steady_clock::now();
  return deadline <= now ? milliseconds(0) : std::chrono::ceil<milliseconds>(deadline - now);
}

// Piece j of a contribution of `total` bytes cut in `piece`-byte pieces: (offset, length).
std::pair<std::size_t, std::size_t> slice(std::uint64_t total, std::size_t j, std::size_t piece) {
  const std::uint64_t off = static_cast<std::uint64_t>(j) * piece;
  if (off >= total) return {static_cast<std::size_t>(total), 0};
  return {static_cast<std::size_t>(off), static_cast<std::size_t>(std::min<std::uint64_t>(piece, total - off))};
}

std::size_t rounds_for(std::uint64_t largest, std::size_t piece) {
  return std::max<std::size_t>(1, static_cast<std::size_t>((largest + piece - 1) / piece));
}

// A protocol fault naming the root as its culprit; `what` is what it announced.
Fault root_announced(std::uint32_t root, const std::string& what) {
  return Fault{Status::PROTOCOL_ERROR, root, "the root, " + rank_name(root) + ", announced " + what};
}

// An error from the Session about talking to `peer`, as a fault pointing at it.
Fault fault_of(std::exception_ptr e, std::uint32_t peer, std::uint32_t self, const std::string& context) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    Status s = err.status();
    std::uint32_t culprit = peer;
    if (s == Status::NOT_CONNECTED) s = Status::PEER_LOST;  // it was connected: it went away
    if (s == Status::CLOSED) culprit = self;
    return Fault{s, culprit, context + ": " + err.what()};
  } catch (const std::exception& err) {
    return Fault{Status::ERROR, self, context + ": " + err.what()};
  }
}

}  // namespace

std::shared_ptr<Batch> WorldImpl::batch() { return std::make_shared<Batch>(ex); }

std::vector<std::uint32_t> WorldImpl::others() const {
  std::vector<std::uint32_t> out;
  for (std::uint32_t p = 0; p < size; ++p)
    if (p != rank) out.push_back(p);
  return out;
}

std::size_t WorldImpl::half() const { return align_down(session.buffer().size() / 2); }

// -- messages ------------------------------------------------------------------------------------

// A failed send does not fail the step: a peer that is gone is reported by the receives from it,
// which first deliver whatever it sent before it went (an abort naming the real culprit).
void WorldImpl::send(const std::shared_ptr<Batch>& b, std::uint32_t to, WorldMessage m, std::span<const std::byte> piece) {
  b->add();
  session.async_ctrl_send(to, CtrlMessage::from_bytes(encode(m, piece)), [b, to, self = rank](std::exception_ptr e) {
    if (e) runtime::log().debug("world rank {}: a message to rank {} was not sent", self, to);
    b->done(std::nullopt);
  });
}

void WorldImpl::expect(const std::shared_ptr<Batch>& b, std::uint32_t from, WorldKind kind, std::uint64_t seq,
                       std::uint16_t step, time_point deadline,
                       std::function<void(const WorldMessage&, std::span<const std::byte>)> on_message) {
  b->add();
  session.async_ctrl_recv(
      from, left(deadline),
      [b, from, kind, seq, step, self = rank, on = std::move(on_message)](std::exception_ptr e, CtrlMessage m) {
        if (e) return b->done(fault_of(e, from, self, std::string("waiting for a ") + to_string(kind) + " from " + rank_name(from)));
        std::string why;
        std::span<const std::byte> piece;
        const auto msg = decode_world_message(m.bytes(), why, &piece);
        if (!msg) return b->done(Fault{Status::PROTOCOL_ERROR, from, rank_name(from) + ": " + why});
        if (msg->kind == WorldKind::abort) {
          const auto culprit = static_cast<std::uint32_t>(msg->a);
          const auto status = static_cast<Status>(msg->reason);
          std::string what = status == Status::PEER_LOST ? rank_name(culprit) + " was lost"
                                                          : std::string(hmc::to_string(status)) + " at " + rank_name(culprit);
          return b->done(Fault{status, culprit, what + " (reported by " + rank_name(from) + ")"});
        }
        if (msg->kind != kind || msg->seq != seq || msg->step != step)
          return b->done(Fault{Status::PROTOCOL_ERROR, from,
                               rank_name(from) + " sent a " + to_string(msg->kind) + " of round " +
                                   std::to_string(msg->seq) + " step " + std::to_string(msg->step) + ", expected a " +
                                   to_string(kind) + " of round " + std::to_string(seq) + " step " +
                                   std::to_string(step) + " (every rank must call the same collectives in order)"});
        // A late message of a batch that already failed must not write into the caller's buffers:
        // the collective has returned (or is returning) its error and the caller may have freed them.
        if (on && !b->failed()) {
          try {
            on(*msg, piece);
          } catch (const Fault& f) {
            return b->done(f);
          }
        }
        b->done(std::nullopt);
      });
}

void WorldImpl::get(const std::shared_ptr<Batch>& b, std::uint32_t from, std::size_t local, std::size_t remote,
                    std::size_t n) {
  if (n == 0) return;
  b->add();
  session.async_get(from, local, remote, n, [b, from, self = rank](std::exception_ptr e) {
    b->done(e ? std::optional<Fault>(fault_of(e, from, self, "get from " + rank_name(from))) : std::nullopt);
  });
}

// -- the collectives -----------------------------------------------------------------------------

// Where the gets of a collective land: straight in the caller's memory when it is large enough to
// be worth registering (one copy less), else in the staging slots, copied out after.
struct WorldImpl::Landing {
  std::optional<RegisteredMemory> direct;
  std::byte* base = nullptr;

  void prepare(Session& session, std::span<std::byte> dest) {
    if (dest.size() < kDirectGet) return;
    base = dest.data();
    direct.emplace(session.register_memory(dest.data(), dest.size()));
  }
  void get(WorldImpl& w, const std::shared_ptr<Batch>& b, std::uint32_t from, std::byte* to, std::size_t staged,
           std::size_t remote, std::size_t n) {
    if (n == 0) return;
    if (!direct) return w.get(b, from, staged, remote, n);
    b->add();
    w.session.async_get_into(*direct, static_cast<std::size_t>(to - base), from, remote, n,
                             [b, from, self = w.rank](std::exception_ptr e) {
                               b->done(e ? std::optional<Fault>(fault_of(e, from, self, "get from " + rank_name(from)))
                                         : std::nullopt);
                             });
  }
  void finish(Session& session, std::byte* to, std::size_t staged, std::size_t n) const {
    if (!direct) session.buffer().read_to_cpu(to, n, staged);
  }
};

// A notice handler that keeps the message and its inline piece (if any) for rank p.
std::function<void(const WorldMessage&, std::span<const std::byte>)> WorldImpl::keep(
    std::shared_ptr<std::vector<WorldMessage>> got, std::shared_ptr<std::vector<std::vector<std::byte>>> pieces,
    std::uint32_t p) {
  return [got, pieces, p](const WorldMessage& m, std::span<const std::byte> piece) {
    (*got)[p] = m;
    (*pieces)[p].assign(piece.begin(), piece.end());
  };
}

time_point WorldImpl::settle_by() const { return runtime::deadline_after(session.options().timeout); }


asio::awaitable<void> WorldImpl::barrier(time_point deadline) {
  if (size == 1) co_return;
  // Dissemination: in step k, signal rank + 2^k and hear from rank - 2^k; after ceil(log2 n) steps
  // everyone has heard, directly or not, from everyone.
  std::vector<std::uint32_t> partners;
  for (std::uint64_t d = 1; d < size; d *= 2) {
    partners.push_back(static_cast<std::uint32_t>((rank + d) % size));
    partners.push_back(static_cast<std::uint32_t>((rank + size - d % size) % size));
  }
  std::sort(partners.begin(), partners.end());
  partners.erase(std::unique(partners.begin(), partners.end()), partners.end());
  co_await ensure(partners, deadline);
  const std::uint64_t s = seq_++;
  std::uint16_t step = 0;
  for (std::uint64_t d = 1; d < size; d *= 2, ++step) {
    auto b = batch();
    WorldMessage m;
    m.kind = WorldKind::signal;
    m.seq = s;
    m.step = step;
    send(b, static_cast<std::uint32_t>((rank + d) % size), m);
    expect(b, static_cast<std::uint32_t>((rank + size - d % size) % size), WorldKind::signal, s, step, deadline, {});
    co_await b->wait();
  }
}

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
      throw Fault{Status::INVALID_ARGUMENT, rank, "out has " + std::to_string(c.out.size()) +
                                                      " bytes, expected size() * in.size() = " + std::to_string(each * n)};
  } else if (equal) {
    if (c.in.size() % n != 0 || c.out.size() != c.in.size())
      throw Fault{Status::INVALID_ARGUMENT, rank, "in and out must both hold size() equal blocks (in " +
                                                      std::to_string(c.in.size()) + ", out " + std::to_string(c.out.size()) + " bytes)"};
    each = c.in.size() / n;
    for (std::size_t d = 0; d < n; ++d) blocks.push_back(c.in.subspan(d * each, each));
  } else {
    if (c.blocks.size() != n)
      throw Fault{Status::INVALID_ARGUMENT, rank, std::to_string(c.blocks.size()) + " blocks for a world of " + std::to_string(n)};
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
                   throw Fault{Status::INVALID_ARGUMENT, p, rank_name(p) + " contributed " + std::to_string(m.c) +
                                                                " bytes, this rank expects " + std::to_string(dst->totals[p]) +
                                                                " (" + name + " needs equal sizes)"};
                 if (m.b != expected)
                   throw Fault{Status::PROTOCOL_ERROR, p, rank_name(p) + " announced a piece of " + std::to_string(m.b) +
                                                              " bytes, expected " + std::to_string(expected)};
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
      for (std::size_t p = 0; p < n; ++p) blk.offsets[p + 1] = blk.offsets[p] + static_cast<std::size_t>(dst->totals[p]);
      blk.data.resize(blk.offsets[n]);
      place(blk.data);
      for (auto p : peers) {
        const auto [o, expected] = slice(dst->totals[p], j, piece);
        const auto& m = (*got)[p];
        if (m.b != expected)
          throw Fault{Status::PROTOCOL_ERROR, p, rank_name(p) + " announced a piece of " + std::to_string(m.b) +
                                                     " bytes, expected " + std::to_string(expected)};
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
      expect(b, c.root, WorldKind::release, s, 1, deadline, [release](const WorldMessage& m, std::span<const std::byte>) { *release = m; });
      co_await b->wait();
      if (j == 0) {
        if (release->c == 0 || release->c > kMaxContribution)
          throw root_announced(c.root, std::to_string(release->c) + " rounds");
        rounds = static_cast<std::size_t>(release->c);
      }
      continue;
    }
    auto got = std::make_shared<std::vector<WorldMessage>>(n);
    for (auto p : peers) expect(b, p, WorldKind::notice, s, 0, deadline, [got, p](const WorldMessage& m, std::span<const std::byte>) { (*got)[p] = m; });
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
      if ((*got)[p].b != expected) throw Fault{Status::PROTOCOL_ERROR, p, rank_name(p) + " announced a piece of the wrong size"};
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
    throw Fault{Status::INVALID_ARGUMENT, rank, std::to_string(c.blocks.size()) + " blocks for a world of " + std::to_string(n)};
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
        send(nb, d, WorldMessage{WorldKind::notice, 0, 1, s, base + slot(d), slice(c.blocks[d].size(), j, piece).second,
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
  expect(b, root, WorldKind::notice, at.seq, 1, deadline, [got](const WorldMessage& m, std::span<const std::byte>) { *got = m; });
  co_await b->wait();
  if (at.j == 0) {
    total = got->c;
    const std::size_t least = rounds_for(total, at.piece);
    const bool consistent = at.exact_rounds ? got->d == least : got->d >= least && got->d <= kMaxContribution;
    if (total > kMaxContribution || got->d == 0 || !consistent)
      throw root_announced(root, "inconsistent sizes (" + std::to_string(total) + " bytes in " + std::to_string(got->d) + " rounds)");
    rounds = static_cast<std::size_t>(got->d);
    out.clear();
  }
  const auto [off, len] = slice(total, at.j, at.piece);
  if (got->b != len)
    throw root_announced(root, "a piece of the wrong size");
  auto g = batch();
  get(g, root, at.base, got->a, len);
  co_await g->wait();
  // Grown by what arrived, not by the announced total: a root that claims 20 GiB and sends
  // nothing costs nothing.
  out.resize(off + len);
  if (len != 0) session.buffer().read_to_cpu(out.data() + off, len, at.base);
}

asio::awaitable<void> WorldImpl::all_reduce(CollectiveCall& c, time_point deadline) {
  const std::size_t n = size;
  const std::size_t es = size_of(c.dtype);
  if (c.in.size() % es != 0 || c.out.size() != c.in.size())
    throw Fault{Status::INVALID_ARGUMENT, rank, "in and out must hold the same whole number of " +
                                                    std::string(to_string(c.dtype)) + " elements"};
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
      throw Fault{Status::INVALID_ARGUMENT, p, rank_name(p) + " reduces " + std::to_string(m.c) + " bytes (type/op " +
                                                   std::to_string(m.d) + "), this rank " + std::to_string(bytes) +
                                                   " bytes (type/op " + std::to_string(kind) + ")"};
  };
  auto slot = [&](std::uint32_t p) { return p < rank ? p : p - 1; };

  if (c.in.size() <= kDirectReduce && align_up(c.in.size()) * (n + 1) <= half()) {
    // Small: every rank gets every input and reduces the whole array, in rank order (same bits everywhere).
    const std::size_t stride = align_up(c.in.size());
    const std::uint64_t s = seq_++;
    const std::size_t base = region(s);
    session.buffer().write_from_cpu(c.in.data(), c.in.size(), base);
    auto got = std::make_shared<std::vector<WorldMessage>>(n);
    auto b = batch();
    for (auto p : peers) send(b, p, WorldMessage{WorldKind::notice, 0, 0, s, base, c.in.size(), c.in.size(), kind});
    for (auto p : peers)
      expect(b, p, WorldKind::notice, s, 0, deadline, [got, p, check](const WorldMessage& m, std::span<const std::byte>) {
        check(p, m);
        (*got)[p] = m;
      });
    co_await b->wait();
    auto g = batch();
    for (auto p : peers) get(g, p, base + stride * (1 + slot(p)), (*got)[p].a, c.in.size());
    co_await g->wait();
    auto input = [&](std::uint32_t p) -> const std::byte* { return p == rank ? buf + base : buf + base + stride * (1 + slot(p)); };
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
    auto got = std::make_shared<std::vector<WorldMessage>>(n);
    auto b = batch();
    for (auto p : peers) send(b, p, WorldMessage{WorldKind::notice, 0, 0, s, base, slice_bytes, c.in.size(), kind});
    for (auto p : peers)
      expect(b, p, WorldKind::notice, s, 0, deadline, [got, p, check](const WorldMessage& m, std::span<const std::byte>) {
        check(p, m);
        (*got)[p] = m;
      });
    co_await b->wait();
    const std::size_t mine_off = chunk_begin(rank) * es;
    const std::size_t mine_len = chunk_bytes(rank);
    auto g = batch();
    for (auto p : peers) {
      if ((*got)[p].b != slice_bytes) throw Fault{Status::PROTOCOL_ERROR, p, rank_name(p) + " announced a slice of the wrong size"};
      get(g, p, staged(p), (*got)[p].a + mine_off, mine_len);
    }
    co_await g->wait();
    auto part = [&](std::uint32_t p) -> const std::byte* { return p == rank ? buf + base + mine_off : buf + staged(p); };
    std::memcpy(buf + reduced, part(0), mine_len);
    for (std::uint32_t p = 1; p < n; ++p) reduce_into(buf + reduced, part(p), mine_len / es, c.dtype, c.op);
    // All-gather of the reduced chunks.
    auto got2 = std::make_shared<std::vector<WorldMessage>>(n);
    auto b2 = batch();
    for (auto p : peers) send(b2, p, WorldMessage{WorldKind::notice, 0, 1, s, reduced, mine_len, c.in.size(), kind});
    for (auto p : peers) expect(b2, p, WorldKind::notice, s, 1, deadline, [got2, p](const WorldMessage& m, std::span<const std::byte>) { (*got2)[p] = m; });
    co_await b2->wait();
    auto g2 = batch();
    for (auto p : peers) {
      if ((*got2)[p].b != chunk_bytes(p)) throw Fault{Status::PROTOCOL_ERROR, p, rank_name(p) + " announced a chunk of the wrong size"};
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