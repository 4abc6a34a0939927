#pragma once
// Every data transport a session serves, side by side (planes: 0 UCX with HMC's TCP path, 1 verbs).
// Each peer is carried by the one plane its client chose when it connected; everything about the
// peer goes to that plane. Planes after the first are built on first use, so a session that never
// meets an RDMA peer never opens an RDMA device. Region ids are this class's own: each plane numbers
// its regions itself, and a plane built later sees only the regions still registered. Loop thread only.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transport/transport.hpp"

namespace hmc::detail {

class MultiTransport final : public Transport {
 public:
  using Factory = std::function<std::unique_ptr<Transport>()>;
  struct Plane {
    std::string name;  // for messages: "UCX", "RDMA"
    Factory make;
  };

  // Builds plane 0 at once; its factory's exception propagates.
  MultiTransport(runtime::loop_executor executor, std::vector<Plane> planes);
  ~MultiTransport() override = default;

  // Builds plane `p` unless it is built; the factory's exception (why the plane cannot be had) propagates.
  void build(std::uint8_t p);
  bool built(std::uint8_t p) const { return p < built_.size() && built_[p] != nullptr; }
  std::size_t plane_count() const { return planes_.size(); }
  const std::string& plane_name(std::uint8_t p) const { return planes_.at(p).name; }
  Transport* plane(std::uint8_t p) const { return built(p) ? built_[p].get() : nullptr; }
  // From now until remove_peer, `rank` is carried by plane `p` (built): call before local_info.
  void assign(std::uint32_t rank, std::uint8_t p);
  // The plane assigned to `rank`, if any.
  std::optional<std::uint8_t> plane_of(std::uint32_t rank) const;

  void attach() override;
  std::vector<std::byte> local_info(std::uint32_t to, const LocalAddress& self) override;
  std::string add_peer(std::uint32_t rank, std::span<const std::byte> info) override;
  void set_peer_host(std::uint32_t rank, const std::string& ip) override { of(rank).set_peer_host(rank, ip); }
  void remove_peer(std::uint32_t rank, error_code reason) override;
  const PeerRecord* peer(std::uint32_t rank) const override;
  std::vector<std::uint32_t> ranks() const override;
  std::string carriers(std::uint32_t rank) const override { return of(rank).carriers(rank); }
  void submit(OpRequest request, Completion done) override;
  std::uint64_t register_region(void* base, std::size_t size, MemoryType type) override;
  void unregister_region(std::uint64_t id) override;
  std::size_t region_size(std::uint64_t id) const override;
  std::size_t live_operations() const override;
  void add_stats(SessionStats& out) const override;
  void expect_losses() override;

  // runtime::Poller: each plane attaches itself to the loop (attach()); nothing to drive here.
  bool progress() override { return false; }
  runtime::ArmResult try_arm() override { return runtime::ArmResult::armed; }
  int fd() const override { return -1; }
  bool has_pending() const override { return false; }

 private:
  struct Region {
    void* base = nullptr;
    std::size_t size = 0;
    MemoryType type = MemoryType::CPU;
    std::vector<std::uint64_t> ids;  // per plane; 0 where the plane is not built
  };

  Transport& of(std::uint32_t rank) const;  // an unknown rank: plane 0 (it answers PEER_LOST)

  runtime::loop_executor executor_;
  std::vector<Plane> planes_;
  std::vector<std::unique_ptr<Transport>> built_;
  std::map<std::uint32_t, std::uint8_t> route_;  // assigned ranks
  std::map<std::uint64_t, Region> regions_;
  std::uint64_t next_region_ = 1;
  bool attached_ = false;
  bool expecting_losses_ = false;
};

}  // namespace hmc::detail
