// The steps every collective is made of (messages, gets, a batch of them) and the barrier.
#include <cstring>

#include "hmc/runtime/deadline.hpp"
#include "hmc/runtime/log.hpp"
#include "world/collective_steps.hpp"

namespace hmc::detail {

using namespace collective;
using Kind = CollectiveCall::Kind;

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
void WorldImpl::send(const std::shared_ptr<Batch>& b, std::uint32_t to, WorldMessage m,
                     std::span<const std::byte> piece) {
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
        if (e)
          return b->done(
              fault_of(e, from, self, std::string("waiting for a ") + to_string(kind) + " from " + rank_name(from)));
        std::string why;
        std::span<const std::byte> piece;
        const auto msg = decode_world_message(m.bytes(), why, &piece);
        if (!msg) return b->done(Fault{Status::PROTOCOL_ERROR, from, rank_name(from) + ": " + why});
        if (msg->kind == WorldKind::abort) {
          const auto culprit = static_cast<std::uint32_t>(msg->a);
          const auto status = static_cast<Status>(msg->reason);
          std::string what = status == Status::PEER_LOST
                                 ? rank_name(culprit) + " was lost"
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

}  // namespace hmc::detail
