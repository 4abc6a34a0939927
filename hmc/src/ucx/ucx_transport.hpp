#pragma once
// The UCX data plane: one context and worker, driven by the event loop as a Poller, endpoints and
// rkeys per peer rank, and one-sided put/get with remote completion for puts. Loop thread only.
#include <ucp/api/ucp.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hmc/conn_buffer.hpp"
#include "hmc/runtime/async_op.hpp"
#include "hmc/runtime/event_loop.hpp"
#include "hmc/runtime/poller.hpp"
#include "hmc/segment.hpp"
#include "ucx/ucx_context.hpp"
#include "ucx/ucx_peer_info.hpp"

namespace hmc::detail {

namespace asio = runtime::asio;
using runtime::error_code;

struct UcxOptions {
  std::chrono::milliseconds timeout{30000};            // every operation's deadline
  std::size_t max_inflight = 1024;                     // operations handed to UCX at once; more wait in a queue
};

// One RMA operation: segments between a local region and the peer's buffer. chunk != 0 makes it a
// pipeline over segments[0] with at most `window` chunks in flight.
struct RmaRequest {
  std::uint32_t rank = 0;
  bool is_put = true;
  std::uint64_t region = 0;  // 0: the session buffer; else an id from register_region
  std::vector<Segment> segments;
  std::size_t chunk = 0;
  std::size_t window = 0;
  std::vector<std::byte> message;  // non-empty: an active message to rank instead of RMA
};

class UcxTransport final : public runtime::Poller {
 public:
  using Completion = asio::any_completion_handler<void(error_code)>;
  using clock = std::chrono::steady_clock;

  UcxTransport(runtime::EventLoop& loop, std::shared_ptr<UcxContext> context, ConnBuffer& buffer,
               UcxOptions options);
  ~UcxTransport() override;  // closes every endpoint; call on the loop thread
  UcxTransport(const UcxTransport&) = delete;
  UcxTransport& operator=(const UcxTransport&) = delete;

  // Starts driving the worker on the loop (loop thread).
  void attach();

  // runtime::Poller
  bool progress() override;
  runtime::ArmResult try_arm() override;
  int fd() const override { return efd_; }
  bool has_pending() const override { return live_ops_ != 0 || !closing_.empty(); }

  // This side's bootstrap message for a peer.
  UcxPeerInfo local_info(std::uint32_t self_rank, const std::string& ip, std::uint16_t data_port);

  // Creates the endpoint and unpacks the rkey; false with `why` when UCX refuses.
  bool add_peer(const UcxPeerInfo& info, std::string& why);
  // Fails the peer's operations with `reason` and closes its endpoint.
  void remove_peer(std::uint32_t rank, error_code reason);
  const UcxPeerInfo* peer(std::uint32_t rank) const;
  std::vector<std::uint32_t> ranks() const;

  // Called (on the loop, outside UCX callbacks) when UCX reports a peer's endpoint failed.
  std::function<void(std::uint32_t rank, error_code)> on_peer_failed;

  // Validated by the caller. A put completes when the bytes are visible in the peer's buffer
  // (puts, then one endpoint flush); a get when they are in the local region.
  void submit(RmaRequest request, Completion done);

  // Active messages from peers (the control fast path), delivered on the loop outside UCX callbacks.
  std::function<void(std::uint32_t rank, std::vector<std::byte> message)> on_message;

  // Registers user memory as a local source/destination (no staging copy); returns its region id.
  std::uint64_t register_region(void* base, std::size_t size, MemoryType type);
  // Unmaps now, or when the last operation using the region is released.
  void unregister_region(std::uint64_t id);
  // Size of a live region; 0 when the id is unknown or unregistered.
  std::size_t region_size(std::uint64_t id) const;

  // Operations accepted and not yet completed to their caller (for tests and shutdown).
  std::size_t live_operations() const noexcept { return live_ops_; }
  std::string transports_in_use(std::uint32_t rank) const;

 private:
  struct Op;
  struct Peer;
  struct FlushBatch;
  struct Region {
    void* base = nullptr;
    std::size_t size = 0;
    ucp_mem_h memh = nullptr;
    std::size_t users = 0;      // operations not yet released
    bool unregistered = false;  // unmap when users drops to 0
    bool owned = true;          // false: the memory's allocator unmaps it (UcxHostMemory)
  };

  static void on_request_done(void* request, ucs_status_t status, void* user_data);
  static void on_flush_done(void* request, ucs_status_t status, void* user_data);
  static void on_close_done(void* request, ucs_status_t status, void* user_data);
  static void on_endpoint_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  static ucs_status_t on_active_message(void* arg, const void* header, std::size_t header_length, void* data,
                                        std::size_t length, const ucp_am_recv_param_t* param);
  void issue_message(Op* op);

  Op* new_op(RmaRequest request, Completion done);
  void enqueue(Op* op);
  void release_region(std::uint64_t id);
  void start(Op* op);
  void issue_segments(Op* op);
  void issue_pipeline_chunks(Op* op);
  bool issue_one(Op* op, const Segment& s, bool with_callback);
  void request_flush(Peer& p, Op* op);
  void flush_now(std::uint32_t rank);
  void op_step(Op* op);
  void finish(Op* op, error_code ec);
  void maybe_release(Op* op);
  void arm_deadline_timer();
  void expire_deadlines();
  void process_completions();
  void start_waiting_ops();
  void close_endpoint(Peer& p, bool force);
  std::string transports_in_use_of(const Peer& p) const;

  runtime::EventLoop& loop_;
  ConnBuffer& buffer_;
  UcxOptions options_;
  std::shared_ptr<UcxContext> context_holder_;  // outlives the worker and UCX-allocated buffers
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::map<std::uint64_t, Region> regions_;  // 0 is the session buffer
  std::uint64_t next_region_ = 1;
  std::vector<std::byte> rkey_;
  std::vector<std::byte> worker_address_;
  std::string host_id_;
  int efd_ = -1;
  runtime::PollerHandle poller_;
  asio::steady_timer deadline_timer_;
  bool deadline_timer_armed_ = false;

  std::map<std::uint32_t, std::unique_ptr<Peer>> peers_;
  std::list<std::unique_ptr<Peer>> closing_;  // endpoints whose close request is in flight
  std::list<std::unique_ptr<Peer>> closed_;   // closed endpoints, kept for late UCX callbacks
  std::list<Op*> by_deadline_;                // one timeout for all ops: submission order is deadline order
  std::deque<Op*> waiting_;                   // over max_inflight: started as others finish
  std::vector<std::unique_ptr<Op>> ops_;      // every op ever made; freed with the transport
  std::vector<Op*> free_ops_;                 // released ops, reused (no allocation per op in steady state)
  std::vector<std::pair<Op*, ucs_status_t>> done_requests_;  // filled by UCX callbacks, drained after progress
  std::vector<std::pair<FlushBatch*, ucs_status_t>> done_flushes_;
  std::vector<std::pair<Peer*, ucs_status_t>> done_closes_;
  std::vector<std::pair<Peer*, ucs_status_t>> failed_peers_;
  std::vector<std::pair<std::uint32_t, std::vector<std::byte>>> received_messages_;
  std::uint32_t self_rank_ = 0;  // sent as the header of every active message
  std::size_t live_ops_ = 0;
  std::size_t started_ops_ = 0;
  std::shared_ptr<int> life_ = std::make_shared<int>(0);  // posted lambdas check it: the transport may be gone
};

}  // namespace hmc::detail
