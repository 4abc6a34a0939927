#pragma once
// The RDMA verbs transport: RC QPs per peer, MRs for the session buffer and registered memory, RDMA
// WRITE / READ posted for the shared OpEngine, the control fast path over SEND / RECV, and the CQ's
// completion channel driven by the event loop as a Poller. It reaches verbs only through VerbsApi
// (real rdma-core, or the emulated fabric in tests). QP information travels in the bootstrap message
// over the authenticated control channel. Loop thread only.
#include <chrono>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "hmc/conn_buffer.hpp"
#include "hmc/runtime/event_loop.hpp"
#include "transport/op_engine.hpp"
#include "transport/peer_table.hpp"
#include "transport/region_table.hpp"
#include "transport/transport.hpp"
#include "verbs/verbs_api.hpp"

namespace hmc::detail {

struct VerbsOptions {
  static constexpr std::size_t kDefaultStripeMin = std::size_t{64} << 10;

  EngineOptions engine;
  std::size_t max_message = (16u << 20) + 1;   // a larger fast-path message disconnects its sender
  std::string device;                          // RDMA device name; empty: HMC_RDMA_DEVICE, else the first one listed
  int port = 0;                                // 0: HMC_RDMA_PORT, else 1
  int gid_index = -1;                          // RoCE GID index; -1: HMC_RDMA_GID_INDEX, else 0
  std::size_t num_chs = 1;                     // RC QPs per peer (operations are spread over them round robin)
  std::size_t stripe_min = kDefaultStripeMin;  // a segment this large is cut into one piece per QP
  std::uint32_t sq_depth = 256;                // send work requests per QP; more wait in the QP's backlog
  std::uint32_t recv_slots = 32;               // receive buffers per QP for fast-path messages
  std::uint32_t slot_size = 4096;              // bytes per receive / send buffer (messages are fragmented)
  std::uint32_t send_slots = 256;              // registered send buffers shared by every peer
  std::uint32_t cq_depth = 4096;               // the CQ never holds more: posts wait instead (backpressure)
};

class VerbsTransport final : public Transport, private OpPoster {
 public:
  // Throws UnsupportedError when no RDMA device is found, Error when the device cannot be set up.
  VerbsTransport(runtime::EventLoop& loop, std::shared_ptr<VerbsApi> api, ConnBuffer& buffer, VerbsOptions options);
  ~VerbsTransport() override;  // aborts every operation, flushes and destroys every QP
  VerbsTransport(const VerbsTransport&) = delete;
  VerbsTransport& operator=(const VerbsTransport&) = delete;

  // Transport
  void attach() override;
  std::vector<std::byte> local_info(std::uint32_t to, const LocalAddress& self) override;
  std::string add_peer(std::uint32_t rank, std::span<const std::byte> info) override;
  void remove_peer(std::uint32_t rank, error_code reason) override;
  const PeerRecord* peer(std::uint32_t rank) const override;
  std::vector<std::uint32_t> ranks() const override;
  std::string carriers(std::uint32_t rank) const override;
  void submit(OpRequest request, Completion done) override;
  std::uint64_t register_region(void* base, std::size_t size, MemoryType type) override;
  void unregister_region(std::uint64_t id) override;
  std::size_t region_size(std::uint64_t id) const override;
  std::size_t live_operations() const override { return engine_->live_operations(); }
  void expect_losses() override { losses_expected_ = true; }
  void add_stats(SessionStats& out) const override {
    if (engine_) engine_->add_stats(out);
  }

  // runtime::Poller
  bool progress() override;
  runtime::ArmResult try_arm() override;
  int fd() const override;
  bool has_pending() const override { return engine_->has_pending() || !closing_.empty() || hellos_ != 0; }

  // The device and port in use ("mlx5_0:1", "hmc_emulated0:1").
  const std::string& device() const noexcept { return device_name_; }

 private:
  // A send work request, posted now or waiting in its QP's backlog for a send-queue / CQ slot.
  struct Wr {
    ibv_wr_opcode opcode = IBV_WR_RDMA_WRITE;
    std::uint64_t local = 0;
    std::uint32_t length = 0;
    std::uint32_t lkey = 0;
    std::uint64_t remote = 0;
    std::uint32_t rkey = 0;
    std::uint64_t wr_id = 0;  // an engine PostId, an internal id, or 0 (unsignalled)
    bool signalled = false;
    std::uint32_t header = 0;  // SEND: the message length written before the fragment (first fragment)
    bool has_header = false;
  };
  struct Posted {
    bool signalled = false;
    std::int64_t slot = -1;  // a send buffer this work request reads
  };
  // A message to a peer that waits for a notify's flush READs (its own, or an earlier message's):
  // messages leave in posting order.
  struct Held {
    std::uint64_t id = 0;                // the flush READs' internal id; 0: a message behind one
    std::span<const std::byte> message;  // the engine keeps it alive until `token` is reported
    PostId token = kNoPostId;
    std::size_t left = 0;  // flush READs not back yet
    error_code error;
  };
  struct Qp {
    ibv_qp* qp = nullptr;
    std::deque<Posted> posted;  // in the send queue and not known complete, in posting order
    std::deque<Wr> backlog;
    std::uint32_t unsignalled_run = 0;
    bool dirty = false;  // puts posted since its last flush
  };
  struct Peer {
    PeerRecord record;
    std::uint64_t remote_base = 0;
    std::uint32_t rkey = 0;
    std::vector<Qp> qps;
    std::size_t next_qp = 0;
    std::vector<std::byte> recv_memory;
    ibv_mr* recv_mr = nullptr;
    std::size_t signalled = 0;  // signalled work requests posted and not yet completed
    std::size_t cq_share = 0;   // CQ entries its posts and receives may still produce
    bool connected = false;     // add_peer ran: its QPs are RTR/RTS
    bool closing = false;
    error_code error;                // the first error completion's meaning
    std::vector<std::byte> partial;  // a fast-path message being reassembled
    std::size_t expected = 0;
    std::deque<Held> held;  // bounded by the engine's max_inflight
  };

  // OpPoster
  PostResult post_rma(std::uint32_t rank, bool is_put, std::uint64_t region, const Segment& s, PostId token) override;
  PostResult post_flush(std::uint32_t rank, PostId token) override;
  PostResult post_message(std::uint32_t rank, std::span<const std::byte> bytes, PostId token) override;
  PostResult post_notify(std::uint32_t rank, std::span<const std::byte> bytes, PostId token) override;
  void kick() override { poller_.kick(); }

  std::unique_ptr<Peer> make_peer(std::uint32_t rank);
  void destroy_peer(Peer& p);
  Peer* live(std::uint32_t rank) const { return peers_.find(rank); }
  void enqueue(Peer& p, Qp& q, Wr wr);
  bool try_post(Peer& p, Qp& q, Wr& wr);
  void drain_backlogs();
  void handle(const ibv_wc& wc);
  void handle_recv(Peer& p, Qp& q, const ibv_wc& wc);
  void post_piece(Peer& p, Qp& q, bool is_put, std::uint64_t local, std::uint32_t lkey, std::uint64_t remote,
                  std::size_t size, std::uint64_t wr_id);
  void report(std::uint64_t wr_id, error_code ec);
  void release_gather(std::uint64_t id, error_code ec);
  PostResult send_message(Peer& p, std::span<const std::byte> bytes, PostId token);
  void release_notify(std::uint64_t id, error_code ec);
  void release_held(Peer& p);
  Wr flush_read(const Peer& p, std::uint64_t wr_id) const;
  void peer_error(Peer& p, error_code ec);
  void finish_failures();
  void reap_closing();
  std::size_t poll_some();
  void ack_events();

  runtime::EventLoop& loop_;
  std::shared_ptr<VerbsApi> api_;
  ConnBuffer& buffer_;
  VerbsOptions options_;
  std::string device_name_;
  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  std::uint8_t port_ = 1;
  ibv_port_attr port_attr_{};
  ibv_gid gid_{};
  int gid_index_ = 0;
  ibv_mr* buffer_mr_ = nullptr;
  std::vector<std::byte> send_memory_;  // send_slots buffers of slot_size, plus the flush scratch
  ibv_mr* send_mr_ = nullptr;
  std::vector<std::uint32_t> free_slots_;
  std::optional<RegionTable> regions_;
  std::optional<OpEngine> engine_;
  runtime::PollerHandle poller_;

  std::map<std::uint32_t, std::unique_ptr<Peer>> prepared_;  // local_info sent, add_peer not yet
  PeerTable<Peer> peers_;
  std::list<std::unique_ptr<Peer>> closing_;  // QPs in the error state, waiting for their flushed completions
  std::unordered_map<std::uint32_t, std::pair<Peer*, std::size_t>> qp_owner_;  // qp_num -> (peer, channel)
  // One engine post carried by several work requests on different QPs (a flush on every dirty QP,
  // the pieces of a striped segment): reported once, when all are back, with the first error.
  struct Gather {
    PostId token = kNoPostId;
    std::size_t left = 0;
    error_code error;
  };
  std::unordered_map<std::uint64_t, Gather> gathers_;  // by the work requests' id (a flush token, or a stripe id)
  std::uint64_t next_stripe_id_ = 0;
  // A notify whose puts went over other channels than 0: its SEND waits for their flush READs.
  std::unordered_map<std::uint64_t, Peer*> held_by_id_;  // the flush READs' internal id -> its peer
  std::uint64_t next_notify_id_ = 0;
  std::size_t cq_used_ = 0;
  std::size_t hellos_ = 0;  // connection probes in flight
  unsigned int unacked_events_ = 0;
  std::vector<ibv_wc> early_;  // completions found while arming, handled by the next progress
  std::vector<std::uint32_t> ready_;
  std::vector<std::pair<std::uint32_t, error_code>> failed_;
  std::vector<std::pair<std::uint32_t, std::vector<std::byte>>> received_;
  std::uint32_t psn_ = 0;
  bool losses_expected_ = false;  // expect_losses()
};

}  // namespace hmc::detail
