#pragma once
// The UCX transport: one worker driven by the event loop as a Poller, an endpoint and an rkey per
// peer, RMA and flushes posted for the shared OpEngine, and the control fast path over active
// messages. Loop thread only.
#include <ucp/api/ucp.h>

#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "hmc/conn_buffer.hpp"
#include "hmc/runtime/event_loop.hpp"
#include "security/throttled_log.hpp"
#include "transport/fast_message.hpp"
#include "transport/op_engine.hpp"
#include "transport/peer_table.hpp"
#include "transport/region_table.hpp"
#include "transport/transport.hpp"
#include "ucx/ucx_context.hpp"
#include "ucx/ucx_peer_info.hpp"

namespace hmc::detail {

struct UcxOptions {
  EngineOptions engine;
  std::size_t max_message = (16u << 20) + 1;  // a larger fast-path message disconnects its sender
};

class UcxTransport final : public Transport, private OpPoster {
 public:
  UcxTransport(runtime::EventLoop& loop, std::shared_ptr<UcxContext> context, ConnBuffer& buffer, UcxOptions options);
  ~UcxTransport() override;  // aborts every operation and closes every endpoint
  UcxTransport(const UcxTransport&) = delete;
  UcxTransport& operator=(const UcxTransport&) = delete;

  // Transport
  void attach() override;
  std::vector<std::byte> local_info(std::uint32_t to, const LocalAddress& self) override;
  std::string add_peer(std::uint32_t rank, std::span<const std::byte> info) override;
  std::string add_peer(std::uint32_t rank, const UcxPeerInfo& info);  // decoded and checked already
  void remove_peer(std::uint32_t rank, error_code reason) override;
  const PeerRecord* peer(std::uint32_t rank) const override;
  std::vector<std::uint32_t> ranks() const override;
  std::string carriers(std::uint32_t rank) const override;
  void submit(OpRequest request, Completion done) override;
  std::uint64_t register_region(void* base, std::size_t size, MemoryType type) override;
  void unregister_region(std::uint64_t id) override;
  std::size_t region_size(std::uint64_t id) const override;
  std::size_t live_operations() const override { return engine_.live_operations(); }
  void add_stats(SessionStats& out) const override { engine_.add_stats(out); }
  void expect_losses() override { losses_expected_ = true; }

  // Whether UCX should carry the data to the peer whose info this is: the two share memory (and
  // `shared_memory` allows it), or this worker and the peer's have a network transport (RDMA, or tcp
  // where the caller named it).
  bool reaches(const UcxPeerInfo& info, bool shared_memory) const;

  // runtime::Poller
  bool progress() override;
  runtime::ArmResult try_arm() override;
  int fd() const override { return efd_; }
  // A wireup does not count: its answer wakes the worker's fd, and a peer that never answers must
  // not keep the loop's safety timer running.
  bool has_pending() const override { return engine_.has_pending() || !closing_.empty(); }

 private:
  struct Peer {
    UcxTransport* owner = nullptr;
    PeerRecord record;
    std::uint64_t remote_base = 0;
    ucp_ep_h ep = nullptr;
    ucp_rkey_h rkey = nullptr;
    bool peer_error_mode = false;   // UCX reports this peer's failure (no shared memory with it)
    bool failed = false;            // UCX reported its failure
    void* close_request = nullptr;  // the close in flight, if UCX returned a request
    bool close_released = false;    // handed back to UCX unfinished at teardown: its callback frees nothing
    std::chrono::steady_clock::time_point linger_until{};  // lingering: closed by then at the latest
    FastHeader fast_header{};                              // names us to the peer; alive while UCX may still send it
    // Fast-path messages waiting behind a notify's flush, in posting order (bounded by the
    // engine's max_inflight). held[held_head..] are waiting; held[i] has sequence held_seq + i.
    struct Held {
      PostId token = kNoPostId;
      std::span<const std::byte> bytes;
      bool ready = false;  // its flush is done (or it is a plain message): it may go
      ucs_status_t status = UCS_OK;
    };
    std::vector<Held> held;
    std::size_t held_head = 0;
    std::uint64_t held_seq = 0;
    bool removed = false;  // no longer in peers_: what it holds is reported failed
  };

  // OpPoster
  PostResult post_rma(std::uint32_t rank, bool is_put, std::uint64_t region, const Segment& s, PostId token) override;
  PostResult post_flush(std::uint32_t rank, PostId token) override;
  PostResult post_message(std::uint32_t rank, std::span<const std::byte> bytes, PostId token) override;
  PostResult post_notify(std::uint32_t rank, std::span<const std::byte> message, PostId token) override;
  void kick() override {
    kicked_ = true;
    poller_.kick();
  }
  PostResult posted(ucs_status_ptr_t r, PostId token, const char* what, std::uint32_t rank);
  PostResult send_message(Peer& p, std::span<const std::byte> bytes, PostId token);
  void release_held(Peer& p);

  static void on_request_done(void* request, ucs_status_t status, void* user_data);
  static void on_notify_flushed(void* request, ucs_status_t status, void* user_data);
  static void on_close_done(void* request, ucs_status_t status, void* user_data);
  static void on_wired(void* request, ucs_status_t status, void* user_data);
  static void on_endpoint_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  static ucs_status_t on_active_message(void* arg, const void* header, std::size_t header_length, void* data,
                                        std::size_t length, const ucp_am_recv_param_t* param);
  void process_completions();
  void close_endpoint(Peer& p, bool force);
  void close_lingering(std::list<std::unique_ptr<Peer>>::iterator it);
  void arm_linger_timer();
  std::string carriers_of(const Peer& p) const;
  Peer* find(std::uint32_t rank) const { return peers_.find(rank); }

  runtime::EventLoop& loop_;
  ConnBuffer& buffer_;
  UcxOptions options_;
  // Peers failing by the dozen (a job's ranks dying together) make one summary line a second.
  std::shared_ptr<ThrottledLog> peer_log_ = std::make_shared<ThrottledLog>(loop_.executor(), "ucx");
  bool losses_expected_ = false;                // expect_losses()
  std::shared_ptr<UcxContext> context_holder_;  // outlives the worker and UCX-allocated buffers
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  RegionTable regions_;
  OpEngine engine_;
  std::vector<std::byte> rkey_;
  std::vector<std::byte> worker_address_;
  std::vector<std::byte> net_worker_address_;
  std::string shm_domain_;
  int efd_ = -1;
  runtime::PollerHandle poller_;

  PeerTable<Peer> peers_;
  // Removed peers UCX has not seen fail yet: their endpoints close once it does (or at linger_until).
  std::list<std::unique_ptr<Peer>> lingering_;
  runtime::asio::steady_timer linger_timer_;
  bool linger_timer_armed_ = false;
  std::shared_ptr<int> life_ = std::make_shared<int>(0);            // timer handlers check it: we may be gone
  std::list<std::unique_ptr<Peer>> closing_;                        // endpoints whose close request is in flight
  std::list<std::unique_ptr<Peer>> closed_;                         // closed endpoints, kept for late UCX callbacks
  std::map<std::uint32_t, std::uint64_t> fast_token_of_;            // rank -> the secret we gave it
  std::unordered_map<std::uint64_t, std::uint32_t> rank_of_token_;  // and back
  std::vector<std::pair<PostId, ucs_status_t>> done_posts_;         // filled by UCX callbacks, drained after progress
  std::vector<std::pair<PostId, ucs_status_t>> reported_posts_;     // the batch being handed to the engine
  struct NotifyFlushed {
    Peer* peer;
    std::uint64_t seq;
    ucs_status_t status;
  };
  std::vector<NotifyFlushed> notify_flushed_;
  // The worker armed (UCS_OK) and since then progress found nothing and every post completed inline:
  // a cycle after a submission needs no new arm (3 syscalls on shm). Cleared by anything else.
  bool armed_ = false;
  bool kicked_ = false;  // a submission since the last try_arm: the cycle is not the fd's
  std::vector<std::pair<Peer*, ucs_status_t>> done_closes_;
  std::vector<std::pair<Peer*, ucs_status_t>> wired_;  // endpoints whose wireup flush came back
  std::size_t wireups_ = 0;                            // wireup flushes still in UCX
  std::vector<std::pair<Peer*, ucs_status_t>> failed_peers_;
  std::vector<std::pair<std::uint32_t, std::vector<std::byte>>> received_messages_;
  std::vector<std::pair<std::uint32_t, std::string>> misbehaving_;  // fast-path protocol violations
  std::uint64_t dropped_messages_ = 0;                              // from senders that presented no valid token
};

}  // namespace hmc::detail
