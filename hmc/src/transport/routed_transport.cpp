#include "transport/routed_transport.hpp"

#include "detail/wire_reader.hpp"
#include "detail/wire_writer.hpp"
#include "hmc/error.hpp"

namespace hmc::detail {
namespace {
constexpr std::uint32_t kRoutedMagic = 0x31545452;  // "RTT1"
constexpr std::size_t kMaxPart = std::size_t{1} << 20;
}  // namespace

RoutedTransport::RoutedTransport(std::unique_ptr<UcxTransport> ucx, std::unique_ptr<TcpTransport> tcp)
    : ucx_(std::move(ucx)), tcp_(std::move(tcp)) {}

void RoutedTransport::attach() {
  for (Transport* t : {static_cast<Transport*>(ucx_.get()), static_cast<Transport*>(tcp_.get())}) {
    t->on_peer_failed = [this, t](std::uint32_t rank, error_code reason) {
      auto it = route_.find(rank);
      if (it == route_.end() || it->second != t) return;
      route_.erase(it);
      if (on_peer_failed) on_peer_failed(rank, reason);
    };
    t->on_peer_ready = [this, t](std::uint32_t rank) {
      auto it = route_.find(rank);
      if (it != route_.end() && it->second == t && on_peer_ready) on_peer_ready(rank);
    };
    // A fast-path message is identified by the transport that received it: the peer's secret there.
    t->on_message = [this](std::uint32_t rank, std::span<const std::byte> message) {
      if (on_message) on_message(rank, message);
    };
    t->attach();
  }
}

std::vector<std::byte> RoutedTransport::local_info(std::uint32_t to, const LocalAddress& self) {
  const std::vector<std::byte> u = ucx_->local_info(to, self);
  const std::vector<std::byte> t = tcp_->local_info(to, self);
  WireWriter w;
  w.u32(kRoutedMagic);
  w.blob(u.data(), u.size());
  w.blob(t.data(), t.size());
  return w.take();
}

std::string RoutedTransport::add_peer(std::uint32_t rank, std::span<const std::byte> info) {
  if (route_.count(rank) != 0) return "rank " + std::to_string(rank) + " is connected already";
  WireReader r(info);
  std::uint32_t magic = 0;
  std::vector<std::byte> u, t;
  if (!r.u32(magic) || magic != kRoutedMagic) return "not a UCX session's peer info (is the peer using ConnType::RDMA?)";
  if (!r.blob(u, kMaxPart) || !r.blob(t, kMaxPart) || !r.done()) return "truncated or oversized peer info";
  Transport* carrier = ucx_->reaches(u) ? static_cast<Transport*>(ucx_.get()) : static_cast<Transport*>(tcp_.get());
  std::string why = carrier->add_peer(rank, carrier == ucx_.get() ? std::span<const std::byte>(u) : t);
  if (why.empty()) route_[rank] = carrier;
  return why;
}

void RoutedTransport::remove_peer(std::uint32_t rank, error_code reason) {
  route_.erase(rank);
  ucx_->remove_peer(rank, reason);  // both gave the peer a secret; both forget it
  tcp_->remove_peer(rank, reason);
}

Transport& RoutedTransport::of(std::uint32_t rank) const {
  auto it = route_.find(rank);
  return it == route_.end() ? *ucx_ : *it->second;  // an unknown rank: UCX answers PEER_LOST
}

const PeerRecord* RoutedTransport::peer(std::uint32_t rank) const { return of(rank).peer(rank); }

std::vector<std::uint32_t> RoutedTransport::ranks() const {
  std::vector<std::uint32_t> out;
  for (const auto& [rank, t] : route_) out.push_back(rank);
  return out;
}

std::string RoutedTransport::carriers(std::uint32_t rank) const { return of(rank).carriers(rank); }

void RoutedTransport::submit(OpRequest request, Completion done) {
  of(request.rank).submit(std::move(request), std::move(done));
}

std::uint64_t RoutedTransport::register_region(void* base, std::size_t size, MemoryType type) {
  // Both tables number regions 1, 2, ... and only this class registers: the ids stay equal.
  const std::uint64_t id = ucx_->register_region(base, size, type);
  const std::uint64_t same = tcp_->register_region(base, size, type);
  if (same != id) throw Error(Status::ERROR, "transport region tables out of step");
  return id;
}

void RoutedTransport::unregister_region(std::uint64_t id) {
  ucx_->unregister_region(id);
  tcp_->unregister_region(id);
}

}  // namespace hmc::detail
