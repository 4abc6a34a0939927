#pragma once
// UCX where it protects the data (shared memory within one user's domain, RDMA), HMC's checked TCP
// path for every other peer: chosen per peer from its bootstrap message, which carries both
// transports' parts. Everything else is passed to the transport that carries the peer. Loop thread
// only.
#include <map>
#include <memory>

#include "tcp/tcp_transport.hpp"
#include "transport/transport.hpp"
#include "ucx/ucx_transport.hpp"

namespace hmc::detail {

class RoutedTransport final : public Transport {
 public:
  // `shared_memory` false: same-host peers take the network path too.
  RoutedTransport(std::unique_ptr<UcxTransport> ucx, std::unique_ptr<TcpTransport> tcp, bool shared_memory = true);
  ~RoutedTransport() override = default;

  void attach() override;
  std::vector<std::byte> local_info(std::uint32_t to, const LocalAddress& self) override;
  std::string add_peer(std::uint32_t rank, std::span<const std::byte> info) override;
  void set_peer_host(std::uint32_t rank, const std::string& ip) override { tcp_->set_peer_host(rank, ip); }
  void remove_peer(std::uint32_t rank, error_code reason) override;
  const PeerRecord* peer(std::uint32_t rank) const override;
  std::vector<std::uint32_t> ranks() const override;
  std::string carriers(std::uint32_t rank) const override;
  void submit(OpRequest request, Completion done) override;
  std::uint64_t register_region(void* base, std::size_t size, MemoryType type) override;
  void unregister_region(std::uint64_t id) override;
  std::size_t region_size(std::uint64_t id) const override { return ucx_->region_size(id); }
  std::size_t live_operations() const override { return ucx_->live_operations() + tcp_->live_operations(); }
  void add_stats(SessionStats& out) const override {
    ucx_->add_stats(out);
    tcp_->add_stats(out);
  }
  void expect_losses() override {
    ucx_->expect_losses();
    tcp_->expect_losses();
  }

  // The bootstrap message: both transports' parts. unpack: empty string, else what is wrong.
  static std::vector<std::byte> pack(std::span<const std::byte> ucx, std::span<const std::byte> tcp);
  static std::string unpack(std::span<const std::byte> info, std::vector<std::byte>& ucx, std::vector<std::byte>& tcp);

  // runtime::Poller: UCX's worker is what the loop drives; the TCP path completes through Asio.
  bool progress() override { return ucx_->progress(); }
  runtime::ArmResult try_arm() override { return ucx_->try_arm(); }
  int fd() const override { return ucx_->fd(); }
  bool has_pending() const override { return ucx_->has_pending(); }

 private:
  Transport& of(std::uint32_t rank) const;

  std::unique_ptr<UcxTransport> ucx_;
  std::unique_ptr<TcpTransport> tcp_;
  bool shared_memory_;
  std::map<std::uint32_t, Transport*> route_;  // connected peers
};

}  // namespace hmc::detail
