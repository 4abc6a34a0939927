#pragma once
// What the collectives share: their size limits, deadline and piece arithmetic, how a Session error
// becomes a fault naming its culprit, and where a collective's gets land.
#include <algorithm>
#include <chrono>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "hmc/error.hpp"
#include "world/batch.hpp"
#include "world/world_impl.hpp"

namespace hmc::detail::collective {

constexpr std::size_t kAlign = 64;
constexpr std::uint64_t kMaxContribution = std::uint64_t{1} << 40;  // a peer's claimed size beyond this is hostile
constexpr std::size_t kDirectReduce = std::size_t{64} << 10;        // all_reduce of at most this: one hop
constexpr std::size_t kDirectGet = std::size_t{256} << 10;          // results this large are registered

inline std::size_t align_down(std::size_t x) { return x & ~(kAlign - 1); }
inline std::size_t align_up(std::size_t x) { return (x + kAlign - 1) & ~(kAlign - 1); }

inline std::chrono::milliseconds left(time_point deadline) {
  const auto now = std::chrono::steady_clock::now();
  return deadline <= now ? std::chrono::milliseconds(0) : std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
}

// Piece j of a contribution of `total` bytes cut in `piece`-byte pieces: (offset, length).
inline std::pair<std::size_t, std::size_t> slice(std::uint64_t total, std::size_t j, std::size_t piece) {
  const std::uint64_t off = static_cast<std::uint64_t>(j) * piece;
  if (off >= total) return {static_cast<std::size_t>(total), 0};
  return {static_cast<std::size_t>(off), static_cast<std::size_t>(std::min<std::uint64_t>(piece, total - off))};
}

inline std::size_t rounds_for(std::uint64_t largest, std::size_t piece) {
  return std::max<std::size_t>(1, static_cast<std::size_t>((largest + piece - 1) / piece));
}

// A protocol fault naming the root as its culprit; `what` is what it announced.
inline Fault root_announced(std::uint32_t root, const std::string& what) {
  return Fault{Status::PROTOCOL_ERROR, root, "the root, " + rank_name(root) + ", announced " + what};
}

// An error from the Session about talking to `peer`, as a fault pointing at it.
inline Fault fault_of(std::exception_ptr e, std::uint32_t peer, std::uint32_t self, const std::string& context) {
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

}  // namespace hmc::detail::collective

namespace hmc::detail {

// Where the gets of a collective land: straight in the caller's memory when it is large enough to
// be worth registering (one copy less), else in the staging slots, copied out after.
struct WorldImpl::Landing {
  std::optional<RegisteredMemory> direct;
  std::byte* base = nullptr;

  void prepare(Session& session, std::span<std::byte> dest) {
    if (dest.size() < collective::kDirectGet) return;
    base = dest.data();
    direct.emplace(session.register_memory(dest.data(), dest.size()));
  }
  void get(WorldImpl& w, const std::shared_ptr<Batch>& b, std::uint32_t from, std::byte* to, std::size_t staged,
           std::size_t remote, std::size_t n) {
    if (n == 0) return;
    if (!direct) return w.get(b, from, staged, remote, n);
    b->add();
    w.session.async_get_into(
        *direct, static_cast<std::size_t>(to - base), from, remote, n, [b, from, self = w.rank](std::exception_ptr e) {
          b->done(e ? std::optional<Fault>(collective::fault_of(e, from, self, "get from " + rank_name(from)))
                    : std::nullopt);
        });
  }
  void finish(Session& session, std::byte* to, std::size_t staged, std::size_t n) const {
    if (!direct) session.buffer().read_to_cpu(to, n, staged);
  }
};

}  // namespace hmc::detail
