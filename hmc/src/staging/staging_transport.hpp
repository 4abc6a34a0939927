#pragma once
// GPU staging (docs/gpu-staging.md): a decorator over any Transport for device memory the
// transport cannot move itself (Debian's UCX has no CUDA/ROCm support). Device memory on this side
// goes through bounded pinned host bounce slots in a pipeline (put: device -> slot, then RMA from
// the slot; get: RMA into a slot, then slot -> device). A device session buffer is exposed to the
// transport as a pinned host mirror; peers ask its owner over the control fast path to copy mirror
// ranges in (after their puts) and out (before their gets). Everything else passes straight
// through. Loop thread only.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>
#include <vector>

#include "hmc/conn_buffer.hpp"
#include "hmc/runtime/event_loop.hpp"
#include "staging/bounce_pool.hpp"
#include "staging/device_copier.hpp"
#include "staging/staging_wire.hpp"
#include "transport/transport.hpp"

namespace hmc::detail {

struct StagingOptions {
  std::size_t bounce_bytes = std::size_t{8} << 20;  // pinned host memory per device type in use
  std::size_t chunk = std::size_t{1} << 20;         // one bounce slot, one pipelined piece
  std::chrono::milliseconds timeout{30000};         // every staged operation's deadline
  std::vector<MemoryType> native{MemoryType::CPU};  // what the inner transport moves itself
};

class StagingTransport final : public Transport {
 public:
  // Builds the transport that carries the bytes over the memory it may expose to peers.
  using MakeInner = std::function<std::unique_ptr<Transport>(ConnBuffer& exposed)>;

  // `buffer` is the session buffer; the inner transport gets it, or its pinned host mirror when it
  // is device memory of a type not in options.native.
  StagingTransport(runtime::EventLoop& loop, ConnBuffer& buffer, StagingOptions options, const MakeInner& make_inner);
  ~StagingTransport() override;  // fails staged operations with CLOSED, then closes the inner transport
  StagingTransport(const StagingTransport&) = delete;
  StagingTransport& operator=(const StagingTransport&) = delete;

  bool buffer_staged() const noexcept { return mirror_ != nullptr; }

  // Transport
  void attach() override;
  std::vector<std::byte> local_info(std::uint32_t to, const LocalAddress& self) override;
  std::string add_peer(std::uint32_t rank, std::span<const std::byte> info) override;
  void set_peer_host(std::uint32_t rank, const std::string& ip) override { inner_->set_peer_host(rank, ip); }
  void remove_peer(std::uint32_t rank, error_code reason) override;
  const PeerRecord* peer(std::uint32_t rank) const override { return inner_->peer(rank); }
  std::vector<std::uint32_t> ranks() const override { return inner_->ranks(); }
  std::string carriers(std::uint32_t rank) const override;
  void submit(OpRequest request, Completion done) override;
  std::uint64_t register_region(void* base, std::size_t size, MemoryType type) override;
  void unregister_region(std::uint64_t id) override;
  std::size_t region_size(std::uint64_t id) const override;
  std::size_t live_operations() const override { return inner_->live_operations() + ops_.size(); }
  void expect_losses() override { inner_->expect_losses(); }
  void add_stats(SessionStats& out) const override {
    inner_->add_stats(out);
    out.staging.copies += staged_.copies;
    out.staging.bytes += staged_.bytes;
  }

  // runtime::Poller: the inner transport is what the loop drives (attach() attaches it).
  bool progress() override { return inner_->progress(); }
  runtime::ArmResult try_arm() override { return inner_->try_arm(); }
  int fd() const override { return inner_->fd(); }
  bool has_pending() const override { return inner_->has_pending(); }

 private:
  struct Device;
  struct Op;
  struct StagedRegion {
    std::byte* base = nullptr;
    std::size_t size = 0;
    Device* device = nullptr;
    std::size_t users = 0;
    bool unregistered = false;
  };
  using CopyDone = std::function<void(error_code)>;

  Device& device_for(MemoryType type, int device_id);
  BouncePool& pool_of(Device& d);
  void watch(Device& d);
  void drain(Device& d);
  error_code start_copy(Device& d, DeviceCopier::Direction dir, void* dst, const void* src, std::size_t n,
                        CopyDone done);

  void start(Op& op);
  void begin_move(Op& op);
  void pump(Op& op);
  void piece_done(Op& op, std::size_t slot, error_code ec);
  void after_move(Op& op);
  void succeed(Op& op);
  void send_requests(Op& op, StageKind kind);
  void answered(std::uint32_t rank, const StageMessage& m);
  void serve(std::uint32_t rank, const StageMessage& m);
  void send(std::uint32_t rank, const StageMessage& m);
  void finish(Op& op, error_code ec);
  void maybe_free(Op& op);
  void wake_waiters(Device& d);
  void fail_rank(std::uint32_t rank, error_code reason);
  Op* find_op(std::uint64_t id);

  runtime::EventLoop& loop_;
  ConnBuffer& buffer_;
  StagingOptions options_;
  std::map<std::pair<MemoryType, int>, std::unique_ptr<Device>> devices_;
  Device* buffer_device_ = nullptr;     // the session buffer's device, when the buffer is staged
  std::unique_ptr<ConnBuffer> mirror_;  // what peers reach of a staged session buffer
  std::unique_ptr<Transport> inner_;
  std::map<std::uint64_t, StagedRegion> regions_;  // registered device memory the inner transport cannot move
  std::uint64_t next_region_ = 1;
  std::set<std::uint32_t> staged_peers_;  // peers whose session buffer is a mirror
  std::map<std::uint64_t, std::unique_ptr<Op>> ops_;
  std::uint64_t next_op_ = 1;
  std::map<std::uint64_t, std::pair<std::uint32_t, std::uint64_t>> requests_;  // request id -> (rank, op id)
  std::uint64_t next_request_ = 1;
  std::unordered_map<std::uint64_t, CopyDone> copies_;  // copy id -> what follows it
  std::uint64_t next_copy_ = 1;
  StagingStats staged_;                                   // copies started, for stats()
  std::map<std::uint32_t, std::size_t> serving_;          // rank -> its stage requests being copied here
  std::shared_ptr<int> life_ = std::make_shared<int>(0);  // posted handlers check it: we may be gone
};

}  // namespace hmc::detail
