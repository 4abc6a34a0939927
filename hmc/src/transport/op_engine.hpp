#pragma once
// The transport-independent half of the data plane: operation records with exactly one terminal
// state, deadlines, max_inflight backpressure, batches, pipelines with a sliding window and remote
// completion for puts. It asks a transport (OpPoster) to post work tagged with a PostId; the
// transport reports each signalled post back by that token. Loop thread only.
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "hmc/runtime/async_op.hpp"
#include "hmc/segment.hpp"
#include "hmc/session_stats.hpp"
#include "transport/region_table.hpp"

namespace hmc::detail {

namespace asio = runtime::asio;
using runtime::error_code;

// Names one signalled post for the engine (a verbs wr_id, a UCX request's user data), where Asio's
// "token" means a completion token. Opaque to the transport; kNoPostId marks an unsignalled post,
// which is never reported and is covered by a flush.
using PostId = std::uint64_t;
inline constexpr PostId kNoPostId = 0;

// error: the post failed now (nothing was handed to the hardware). pending: it will be reported
// once through OpEngine::completed(token, ...). Neither: it completed inline and is not reported.
struct PostResult {
  error_code error;
  bool pending = false;
};

// What the engine needs from a transport. Posts are for connected peers; a transport answers a post
// for an unknown rank with PEER_LOST and never throws. Completions are reported on the loop thread,
// outside the transport's own callbacks.
class OpPoster {
 public:
  // One segment between local region `region` and the peer's buffer.
  virtual PostResult post_rma(std::uint32_t rank, bool is_put, std::uint64_t region, const Segment& s,
                              PostId token) = 0;
  // Completes when every put posted to `rank` before it is visible in the peer's memory and no
  // longer reads local memory (UCX: endpoint flush; verbs: the last signalled WR of the burst).
  virtual PostResult post_flush(std::uint32_t rank, PostId token) = 0;
  // A control fast-path message; `bytes` stays alive until the post is reported.
  virtual PostResult post_message(std::uint32_t rank, std::span<const std::byte> bytes, PostId token) = 0;
  // post_message that the peer receives only after every put posted to `rank` before it is visible
  // in its memory; reported once like post_message, when those puts no longer read local memory
  // either (UCX: endpoint flush, then the active message; verbs: WRITE_WITH_IMM on the last write).
  // Fast-path messages to one peer (plain or notify) reach it in the order they were posted.
  virtual PostResult post_notify(std::uint32_t rank, std::span<const std::byte> message, PostId token) = 0;
  // Posts were made after the poller may have armed: progress-then-arm must run again.
  virtual void kick() = 0;

 protected:
  ~OpPoster() = default;
};

// put_notify: put the segments, then a fast-path message the peer sees only after their bytes.
// flush: completes once everything posted to the peer before it is complete at the peer.
enum class OpKind : std::uint8_t { put, get, message, put_notify, flush };

// One operation as the Session submits it (validated already). The spans are read during submit()
// only: the engine copies them into its pooled record (no allocation per operation once warm).
struct OpRequest {
  std::uint32_t rank = 0;
  OpKind kind = OpKind::put;
  std::uint64_t region = 0;            // local memory: 0 the session buffer, else a RegionTable id
  std::span<const Segment> segments;   // put/get/put_notify: one or more segments (a batch)
  std::size_t chunk = 0;               // != 0: a pipeline over segments[0] in chunk-byte pieces ...
  std::size_t window = 0;              // ... with at most `window` of them in flight
  std::span<const std::byte> message;  // message/put_notify: the fast-path message
};

// Where an operation is. The last four are terminal: the caller has been told (once) and nothing
// more is posted for the operation; its record lives on until every post it made was reported.
enum class OpState : std::uint8_t { queued, active, done, failed, timed_out, aborted };

struct EngineOptions {
  std::chrono::milliseconds timeout{30000};  // every operation's deadline (saturating)
  std::size_t max_inflight = 1024;           // operations posting at once; more wait in a FIFO
};

class OpEngine {
 public:
  using Completion = asio::any_completion_handler<void(error_code)>;

  OpEngine(runtime::loop_executor executor, OpPoster& poster, RegionTable& regions, EngineOptions options);
  ~OpEngine();
  OpEngine(const OpEngine&) = delete;
  OpEngine& operator=(const OpEngine&) = delete;

  // `done` runs once, later on the loop (never inside submit or the transport's report), with the
  // terminal state's error (none for done). Completions found in one loop turn run from one post.
  void submit(OpRequest request, Completion done);

  // The transport reports a signalled post (ec: its failure, if any).
  void completed(PostId token, error_code ec);

  // A peer the transport can post to, and its removal: every operation for `rank` that is not
  // terminal becomes aborted with `reason` now; posts still in the hardware are waited for quietly.
  void peer_added(std::uint32_t rank);
  void peer_removed(std::uint32_t rank, error_code reason);

  // True while a caller waits for an operation or a live peer has posts outstanding: the loop then
  // keeps its safety timer. Posts to removed peers do not count (a dead endpoint may never return them).
  bool has_pending() const noexcept { return waiting_callers_ != 0 || live_posts_ != 0; }
  // Posts handed to the transport and not yet reported, including removed peers' (for teardown).
  std::size_t posts_outstanding() const noexcept { return all_posts_; }
  // Operation records not yet released.
  std::size_t live_operations() const noexcept { return live_ops_; }
  // Operation and flush records ever made (they are reused): flat in steady state.
  std::size_t records() const noexcept { return ops_.size() + batches_.size(); }
  // Adds what ended here, by kind and per live peer, and what is in flight, to `out`.
  void add_stats(SessionStats& out) const;

 private:
  struct Op;
  struct FlushBatch;
  struct PeerState;

  Op* new_op(const OpRequest& request, Completion done);
  void enqueue(Op* op);
  void start(Op* op);
  void post_segments(Op* op);
  void post_chunks(Op* op);
  void post_message(Op* op);
  void post_notify(Op* op);
  void note_post(Op* op, const PostResult& r, PostId token);
  void fail(Op* op, error_code ec);
  void step(Op* op);
  void terminal(Op* op, OpState state, error_code ec);
  void count(const Op* op, OpState state);
  void post_completions();
  void run_completions();
  void maybe_release(Op* op);
  void start_waiting_ops();
  void request_flush(Op* op);
  void flush_now(std::uint32_t rank, Op* current);
  void flush_deferred();
  void flush_done(FlushBatch* batch, error_code ec, Op* current);
  void arm_deadline_timer();
  void expire_deadlines();
  void unlink_deadline(Op* op);
  void unlink_waiting(Op* op);

  runtime::loop_executor executor_;
  OpPoster& poster_;
  RegionTable& regions_;
  EngineOptions options_;
  asio::steady_timer deadline_timer_;
  bool deadline_timer_armed_ = false;

  std::map<std::uint32_t, PeerState> peers_;
  std::vector<std::unique_ptr<Op>> ops_;  // every record ever made; reused through free_ops_
  std::vector<Op*> free_ops_;
  std::vector<std::unique_ptr<FlushBatch>> batches_;  // the same for flush batches
  std::vector<FlushBatch*> free_batches_;
  Op* deadline_head_ = nullptr;  // intrusive, submission order = deadline order (one timeout for all)
  Op* deadline_tail_ = nullptr;
  Op* waiting_head_ = nullptr;  // intrusive FIFO of queued operations (over max_inflight)
  Op* waiting_tail_ = nullptr;
  bool starting_ = false;  // start_waiting_ops is running (no recursion through failing starts)
  // Terminal operations' completions, run by one posted run_completions (a post per operation
  // cost more than the put itself on shared memory). running_ is the batch being run.
  struct Ready {
    Completion done;
    error_code ec;
  };
  std::vector<Ready> ready_;
  std::vector<Ready> running_;
  std::size_t running_next_ = 0;  // running_[running_next_..] have not run yet
  bool completions_posted_ = false;
  bool completing_ = false;                      // run_completions is running completions
  std::vector<std::uint32_t> deferred_flushes_;  // peers whose flush waits for the batch's end
  std::size_t live_ops_ = 0;
  std::size_t started_ops_ = 0;                           // operations holding a max_inflight slot
  std::size_t waiting_callers_ = 0;                       // operations not yet terminal
  std::size_t live_posts_ = 0;                            // signalled posts and flushes outstanding on live peers
  std::size_t all_posts_ = 0;                             // the same, including removed peers'
  std::shared_ptr<int> life_ = std::make_shared<int>(0);  // posted handlers check it: the engine may be gone
  std::array<OpStats, 6> kind_stats_{};                   // by StatKind
  std::uint64_t submitted_ = 0;                           // every kSampleEvery-th operation is timed
};

}  // namespace hmc::detail
