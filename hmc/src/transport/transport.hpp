#pragma once
// The one interface the Session uses for its data plane, whatever carries the bytes (UCX, HMC's
// TCP path or verbs; RoutedTransport and StagingTransport wrap them). A transport is a Poller the
// loop drives; it owns a peer table, an OpEngine for its operations, a RegionTable for its memory
// and the control fast path. Loop thread only.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "hmc/memory_type.hpp"
#include "hmc/runtime/poller.hpp"
#include "transport/op_engine.hpp"

namespace hmc::detail {

// What the Session knows about a connected peer, from its bootstrap message.
struct PeerRecord {
  std::uint32_t rank = 0;
  std::string ip;  // the (ip, data_port) the peer advertises; how the reference API names it
  std::uint16_t data_port = 0;
  std::uint64_t buffer_size = 0;
};

// How this session introduces itself to peers.
struct LocalAddress {
  std::uint32_t rank = 0;
  std::string ip;
  std::uint16_t data_port = 0;
  std::string bind_ip;  // where the control listener is bound (may be 0.0.0.0); empty: not a server
};

class Transport : public runtime::Poller {
 public:
  using Completion = OpEngine::Completion;

  // Run on the loop, never inside a transport callback. A failed peer is already removed here.
  std::function<void(std::uint32_t rank, error_code reason)> on_peer_failed;
  // A peer added by add_peer became usable: its connection is fully established. Run on the loop.
  std::function<void(std::uint32_t rank)> on_peer_ready;
  // A fast-path message from a connected (or connecting) peer, identified by the transport.
  std::function<void(std::uint32_t rank, std::span<const std::byte> message)> on_message;

  // Starts driving the transport on the loop.
  virtual void attach() = 0;

  // The bootstrap message for peer `to` (sent over the control channel). It carries a secret that
  // only `to` learns, which identifies its fast-path messages; a new one replaces the previous.
  virtual std::vector<std::byte> local_info(std::uint32_t to, const LocalAddress& self) = 0;
  // Connects to `rank` from its bootstrap message. Empty on success, else why not. A rank that is
  // connected already is refused (remove it first). on_peer_ready (or on_peer_failed) follows once
  // the connection is established; no operation may be submitted for the peer before.
  virtual std::string add_peer(std::uint32_t rank, std::span<const std::byte> info) = 0;
  // The address this side's control connection reaches `rank` at (empty: a Unix socket), before
  // add_peer: where to dial a peer whose listener is bound to every interface.
  virtual void set_peer_host(std::uint32_t /*rank*/, const std::string& /*ip*/) {}
  // Aborts the peer's operations with `reason` and closes its connection; forgets its secret.
  virtual void remove_peer(std::uint32_t rank, error_code reason) = 0;
  virtual const PeerRecord* peer(std::uint32_t rank) const = 0;
  virtual std::vector<std::uint32_t> ranks() const = 0;
  // What carries the data to `rank`, for humans and tests (e.g. "posix,cma", "tcp").
  virtual std::string carriers(std::uint32_t rank) const = 0;

  // An operation validated by the caller (ranges, connected peer, live region).
  virtual void submit(OpRequest request, Completion done) = 0;

  // User memory as a local source/destination without a staging copy; returns its region id.
  virtual std::uint64_t register_region(void* base, std::size_t size, MemoryType type) = 0;
  // No new operation may use it; it is unmapped once the operations using it are released.
  virtual void unregister_region(std::uint64_t id) = 0;
  // Size of a usable region (0 is the session buffer); 0 when unknown or unregistered.
  virtual std::size_t region_size(std::uint64_t id) const = 0;

  // Operation records not yet released (tests, shutdown).
  virtual std::size_t live_operations() const = 0;
  // Adds its operations' counters (OpEngine::add_stats) to `out`.
  virtual void add_stats(SessionStats& out) const = 0;
  // The session is closing, and so, as a rule, are its peers: a peer failing from now on is no
  // news and is logged at info.
  virtual void expect_losses() {}

 protected:
  // A peer the transport itself found failed: removed, then reported through on_peer_failed.
  void drop_failed_peer(std::uint32_t rank, error_code reason) {
    remove_peer(rank, reason);
    if (on_peer_failed) on_peer_failed(rank, reason);
  }
};

}  // namespace hmc::detail
