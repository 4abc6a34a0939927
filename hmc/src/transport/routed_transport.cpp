#include "transport/routed_transport.hpp"

#include "hmc/error.hpp"
#include "hmc/status.hpp"
#include "transport/forward_events.hpp"
#include "wire/wire_reader.hpp"
#include "wire/wire_writer.hpp"

namespace hmc::detail {
namespace {
constexpr std::uint32_t kRoutedMagic = 0x31545452;  // "RTT1"
constexpr std::size_t kMaxPart = std::size_t{1} << 20;
}  // namespace

RoutedTransport::RoutedTransport(std::unique_ptr<UcxTransport> ucx, std::unique_ptr<TcpTransport> tcp,
                                 bool shared_memory)
    : ucx_(std::move(ucx)), tcp_(std::move(tcp)), shared_memory_(shared_memory) {}

void RoutedTransport::attach() {
  for (Transport* t : {static_cast<Transport*>(ucx_.get()), static_cast<Transport*>(tcp_.get())}) {
    forward_events(*t, *this, route_, t);
    t->attach();
  }
}

std::vector<std::byte> RoutedTransport::pack(std::span<const std::byte> ucx, std::span<const std::byte> tcp) {
  WireWriter w;
  w.u32(kRoutedMagic);
  w.blob(ucx.data(), ucx.size());
  w.blob(tcp.data(), tcp.size());
  return w.take();
}

std::string RoutedTransport::unpack(std::span<const std::byte> info, std::vector<std::byte>& ucx,
                                    std::vector<std::byte>& tcp) {
  WireReader r(info);
  std::uint32_t magic = 0;
  if (!r.u32(magic) || magic != kRoutedMagic)
    return "not a UCX session's peer info (is the peer using ConnType::RDMA?)";
  if (!r.blob(ucx, kMaxPart) || !r.blob(tcp, kMaxPart) || !r.done()) return "truncated or oversized peer info";
  return {};
}

std::vector<std::byte> RoutedTransport::local_info(std::uint32_t to, const LocalAddress& self) {
  return pack(ucx_->local_info(to, self), tcp_->local_info(to, self));
}

std::string RoutedTransport::add_peer(std::uint32_t rank, std::span<const std::byte> info) {
  if (route_.count(rank) != 0) return "rank " + std::to_string(rank) + " is connected already";
  std::vector<std::byte> u, t;
  if (std::string why = unpack(info, u, t); !why.empty()) return why;
  UcxPeerInfo ucx_info;
  if (std::string why = UcxPeerInfo::decode(u, ucx_info); !why.empty()) return why;
  const bool by_ucx = ucx_->reaches(ucx_info, shared_memory_);
  std::string why = by_ucx ? ucx_->add_peer(rank, ucx_info) : tcp_->add_peer(rank, t);
  if (why.empty()) route_[rank] = by_ucx ? static_cast<Transport*>(ucx_.get()) : tcp_.get();
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
