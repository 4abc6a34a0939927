#include "transport/op_engine.hpp"

#include <time.h>

#include <algorithm>

#include "hmc/error.hpp"
#include "hmc/runtime/deadline.hpp"

namespace hmc::detail {

namespace {
bool is_terminal(OpState s) { return s != OpState::queued && s != OpState::active; }

runtime::steady_clock::time_point from_timespec(const timespec& t) {
  return runtime::steady_clock::time_point(std::chrono::seconds(t.tv_sec) + std::chrono::nanoseconds(t.tv_nsec));
}

// A deadline from the coarse monotonic clock (steady_clock's, read without the TSC: a full read
// was ~5% of an 8 B put) plus one tick of it: never early, at most a tick (a few ms) late.
runtime::steady_clock::time_point coarse_deadline(std::chrono::milliseconds timeout) {
  static const runtime::steady_clock::duration tick = [] {
    timespec res{};
    clock_getres(CLOCK_MONOTONIC_COARSE, &res);
    return from_timespec(res).time_since_epoch();
  }();
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  return runtime::deadline_after(timeout, from_timespec(now) + tick);
}
}  // namespace

struct OpEngine::PeerState {
  std::uint64_t put_bytes = 0, get_bytes = 0, message_bytes = 0, done = 0, failed = 0;  // for stats()
  std::vector<Op*> unflushed;         // puts waiting for the next flush
  bool flush_posted = false;          // a flush_now for this peer is queued on the loop
  std::vector<FlushBatch*> inflight;  // flushes posted and not yet reported
};

struct OpEngine::FlushBatch {
  std::uint32_t rank = 0;
  std::vector<Op*> ops;
  bool live = true;  // false once its peer was removed: it no longer counts, its ops left it
};

struct OpEngine::Op {
  // Back to a fresh record, field by field: the vectors keep their capacity (no allocation when
  // reused) and nothing is moved or rebuilt (a whole-record assignment was ~4% of an 8 B put).
  void reset() {
    state = OpState::queued;
    pipeline = started = orphaned = in_flush = flushed = released = in_deadline_list = false;
    region = 0;
    segments.clear();
    message.clear();
    chunk = window = issued = outstanding = 0;
    error = {};
    deadline = {};
    deadline_prev = deadline_next = waiting_next = nullptr;
    bytes = 0;
    timed = false;
    peer = nullptr;
  }

  std::uint32_t rank = 0;
  OpKind kind = OpKind::put;
  OpState state = OpState::queued;
  bool pipeline = false;
  bool started = false;   // holds a max_inflight slot
  bool orphaned = false;  // its peer was removed: its posts no longer count as live
  bool in_flush = false;  // belongs to a flush batch, queued or posted
  bool flushed = false;
  bool released = false;
  std::uint64_t region = 0;
  // Asio 1.26's any_completion_handler move assignment recurses forever: only ever construct it.
  std::optional<Completion> done;
  std::vector<Segment> segments;
  std::vector<std::byte> message;
  std::size_t chunk = 0, window = 0, issued = 0;  // pipeline: bytes posted so far
  std::size_t outstanding = 0;                    // signalled posts not yet reported
  error_code error;                               // the first failure
  runtime::steady_clock::time_point deadline{};
  Op* deadline_prev = nullptr;
  Op* deadline_next = nullptr;
  bool in_deadline_list = false;
  Op* waiting_next = nullptr;
  PeerState* peer = nullptr;                  // from start() until its peer is removed, for stats()
  std::uint64_t bytes = 0;                    // what it moves, for stats()
  std::uint8_t stat_kind = 0;                 // StatKind
  bool timed = false;                         // a latency sample: `began` is set
  runtime::steady_clock::time_point began{};  // when submitted, for the sample
};

namespace {
// Index into kind_stats_, in SessionStats' order.
enum StatKind : std::uint8_t { k_put, k_get, k_put_batch, k_get_batch, k_put_notify, k_message };

OpStats& kind_of(SessionStats& s, std::size_t k) {
  OpStats* kinds[] = {&s.put, &s.get, &s.put_batch, &s.get_batch, &s.put_notify, &s.message};
  return *kinds[k];
}

// Bucket i: under 2^i us.
std::size_t latency_bucket(runtime::steady_clock::duration d) {
  const auto us = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
  const std::size_t b = us == 0 ? 0 : static_cast<std::size_t>(64 - __builtin_clzll(us));
  return std::min(b, OpStats::kBuckets - 1);
}

// Records are heap objects aligned to at least 8: the low bit tells a flush from an operation.
template <class T>
PostId post_id_of(T* p, bool flush) {
  return static_cast<PostId>(reinterpret_cast<std::uintptr_t>(p)) | (flush ? 1u : 0u);
}
}  // namespace

OpEngine::OpEngine(runtime::loop_executor executor, OpPoster& poster, RegionTable& regions, EngineOptions options)
    : executor_(executor), poster_(poster), regions_(regions), options_(options), deadline_timer_(executor) {}

OpEngine::~OpEngine() {
  deadline_timer_.cancel();
  // The transport removed every peer first; this only covers operations it never could start.
  for (const auto& owned : ops_)
    if (!owned->released) terminal(owned.get(), OpState::aborted, make_error_code(Status::CLOSED));
  // Completions not run yet still reach their callers, in order, each from its own post.
  for (; running_next_ < running_.size(); ++running_next_)
    runtime::complete_later(executor_, std::move(running_[running_next_].done), running_[running_next_].ec);
  for (Ready& r : ready_) runtime::complete_later(executor_, std::move(r.done), r.ec);
}

OpEngine::Op* OpEngine::new_op(const OpRequest& request, Completion done) {
  Op* op = nullptr;
  if (!free_ops_.empty()) {
    op = free_ops_.back();
    free_ops_.pop_back();
    op->reset();
  } else {
    op = ops_.emplace_back(std::make_unique<Op>()).get();
  }
  op->rank = request.rank;
  op->kind = request.kind;
  op->region = request.region;
  op->pipeline = request.chunk != 0;
  op->chunk = request.chunk;
  op->window = request.window;
  op->segments.assign(request.segments.begin(), request.segments.end());
  op->message.assign(request.message.begin(), request.message.end());
  for (const Segment& s : op->segments) op->bytes += s.size;
  const bool many = op->segments.size() > 1;
  op->stat_kind = request.kind == OpKind::message      ? k_message
                  : request.kind == OpKind::put_notify ? k_put_notify
                  : request.kind == OpKind::get        ? (many ? k_get_batch : k_get)
                                                       : (many ? k_put_batch : k_put);
  if (request.kind == OpKind::message) op->bytes = op->message.size();
  if (submitted_++ % OpStats::kSampleEvery == 0) {
    op->timed = true;
    op->began = runtime::steady_clock::now();
  }
  op->done.emplace(std::move(done));
  regions_.acquire(op->region);
  ++live_ops_;
  return op;
}

void OpEngine::submit(OpRequest request, Completion done) { enqueue(new_op(request, std::move(done))); }

void OpEngine::enqueue(Op* op) {
  op->deadline = coarse_deadline(options_.timeout);
  op->deadline_prev = deadline_tail_;
  if (deadline_tail_ != nullptr) deadline_tail_->deadline_next = op;
  else deadline_head_ = op;
  deadline_tail_ = op;
  op->in_deadline_list = true;
  ++waiting_callers_;
  arm_deadline_timer();
  if (started_ops_ >= options_.max_inflight) {
    op->state = OpState::queued;  // backpressure: never rejected, started as others finish
    if (waiting_tail_ != nullptr) waiting_tail_->waiting_next = op;
    else waiting_head_ = op;
    waiting_tail_ = op;
    return;
  }
  start(op);
}

void OpEngine::start(Op* op) {
  op->state = OpState::active;
  op->started = true;
  ++started_ops_;
  const auto peer = peers_.find(op->rank);
  if (peer == peers_.end()) {
    terminal(op, OpState::aborted, make_error_code(Status::PEER_LOST));
    maybe_release(op);
    return;
  }
  op->peer = &peer->second;
  if (op->kind == OpKind::message) {
    post_message(op);
  } else if (op->kind == OpKind::flush) {
    request_flush(op);
  } else if (op->pipeline) {
    post_chunks(op);
  } else {
    post_segments(op);
  }
  poster_.kick();
  step(op);
}

void OpEngine::note_post(Op* op, const PostResult& r, PostId token) {
  if (!r.pending || token == kNoPostId) return;
  ++op->outstanding;
  ++all_posts_;
  if (!op->orphaned) ++live_posts_;
}

void OpEngine::post_segments(Op* op) {
  const bool is_put = op->kind != OpKind::get;
  bool posted_any = false;
  for (const Segment& s : op->segments) {
    // Puts are unsignalled: the flush covers them. Gets write local memory: each one is reported.
    const PostId token = is_put ? kNoPostId : post_id_of(op, false);
    const PostResult r = poster_.post_rma(op->rank, is_put, op->region, s, token);
    if (r.error) {
      fail(op, r.error);
      break;
    }
    posted_any = true;
    note_post(op, r, token);
  }
  // The notify covers the puts: the transport reports it once they are flushed.
  if (op->kind == OpKind::put_notify && !op->error) return post_notify(op);
  // Also after a failure: the flush is what tells when the puts already posted stop reading memory.
  if (is_put && posted_any) request_flush(op);
}

void OpEngine::post_notify(Op* op) {
  const PostId token = post_id_of(op, false);
  const PostResult r = poster_.post_notify(op->rank, op->message, token);
  if (r.error) {
    fail(op, r.error);
    return request_flush(op);  // the puts were posted: they may read memory until flushed
  }
  note_post(op, r, token);
}

void OpEngine::post_chunks(Op* op) {
  const Segment& whole = op->segments.front();
  const PostId token = post_id_of(op, false);
  while (op->state == OpState::active && !op->error && op->issued < whole.size && op->outstanding < op->window) {
    const std::size_t n = std::min(op->chunk, whole.size - op->issued);
    const Segment piece{whole.local_offset + op->issued, whole.remote_offset + op->issued, n};
    const PostResult r = poster_.post_rma(op->rank, op->kind == OpKind::put, op->region, piece, token);
    if (r.error) {
      fail(op, r.error);
      break;
    }
    op->issued += n;
    note_post(op, r, token);
  }
}

void OpEngine::post_message(Op* op) {
  const PostId token = post_id_of(op, false);
  const PostResult r = poster_.post_message(op->rank, op->message, token);
  if (r.error) {
    fail(op, r.error);
    return;
  }
  note_post(op, r, token);
}

void OpEngine::fail(Op* op, error_code ec) {
  if (!op->error) op->error = ec;
}

void OpEngine::step(Op* op) {
  if (op->state != OpState::active) return maybe_release(op);
  if (op->pipeline && !op->error) {
    post_chunks(op);
    poster_.kick();
  }
  if (op->outstanding != 0 || op->in_flush) return;  // an error waits too: memory is still in use
  if (op->pipeline && !op->error) {
    if (op->issued < op->segments.front().size) return;
    if (op->kind == OpKind::put && !op->flushed) {
      request_flush(op);
      if (op->in_flush) return;  // else it completed inline
    }
  }
  terminal(op, op->error ? OpState::failed : OpState::done, op->error);
  maybe_release(op);
}

void OpEngine::terminal(Op* op, OpState state, error_code ec) {
  if (is_terminal(op->state)) return;
  if (op->state == OpState::queued) unlink_waiting(op);
  unlink_deadline(op);
  op->state = state;
  --waiting_callers_;
  if (op->kind != OpKind::flush) count(op, state);
  ready_.push_back(Ready{std::move(*op->done), ec});
  op->done.reset();
  post_completions();
}

void OpEngine::count(const Op* op, OpState state) {
  OpStats& k = kind_stats_[op->stat_kind];
  const bool ok = state == OpState::done;
  if (ok) {
    ++k.done;
    k.bytes += op->bytes;
    if (op->timed) {
      const auto took = runtime::steady_clock::now() - op->began;
      ++k.latency_us[latency_bucket(took)];
      k.latency_sum_us +=
          static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(took).count());
    }
  } else {
    ++(state == OpState::timed_out ? k.timed_out : state == OpState::aborted ? k.aborted : k.failed);
  }
  PeerState* p = op->peer;
  if (p == nullptr) return;  // never started, or its peer is gone
  ++(ok ? p->done : p->failed);
  if (!ok) return;
  (op->kind == OpKind::get ? p->get_bytes : op->kind == OpKind::message ? p->message_bytes : p->put_bytes) += op->bytes;
}

void OpEngine::add_stats(SessionStats& out) const {
  for (std::size_t k = 0; k < kind_stats_.size(); ++k) kind_of(out, k) += kind_stats_[k];
  out.in_flight += waiting_callers_;
  for (const auto& [rank, p] : peers_) {
    auto it = std::find_if(out.peers.begin(), out.peers.end(), [r = rank](const PeerStats& s) { return s.rank == r; });
    if (it == out.peers.end()) it = out.peers.insert(out.peers.end(), PeerStats{rank, {}, 0, 0, 0, 0, 0});
    it->put_bytes += p.put_bytes;
    it->get_bytes += p.get_bytes;
    it->message_bytes += p.message_bytes;
    it->done += p.done;
    it->failed += p.failed;
  }
}

void OpEngine::post_completions() {
  if (completions_posted_) return;
  completions_posted_ = true;
  asio::post(executor_, [this, life = std::weak_ptr<int>(life_)] {
    if (life.lock()) run_completions();
  });
}

// Runs the completions found since the last run, in the order their operations ended. A completion
// may submit (its operation's completion joins the next batch), throw (the rest run from the next
// post) or destroy the engine (its destructor hands the rest to the loop).
void OpEngine::run_completions() {
  completions_posted_ = false;
  if (running_next_ == running_.size()) {  // else: a batch a throwing completion interrupted goes first
    running_.clear();
    running_next_ = 0;
    running_.swap(ready_);  // both keep their capacity
  }
  const std::weak_ptr<int> life = life_;
  completing_ = true;
  while (running_next_ < running_.size()) {
    Ready& r = running_[running_next_++];
    Completion done(std::move(r.done));
    const error_code ec = r.ec;
    try {
      std::move(done)(ec);
    } catch (...) {
      if (!life.expired()) {
        completing_ = false;
        post_completions();
        asio::post(executor_, [this, life] {
          if (life.lock()) flush_deferred();
        });
      }
      throw;
    }
    if (life.expired()) return;
  }
  completing_ = false;
  flush_deferred();
}

void OpEngine::flush_deferred() {
  for (std::size_t i = 0; i < deferred_flushes_.size(); ++i) flush_now(deferred_flushes_[i], nullptr);
  deferred_flushes_.clear();
}

void OpEngine::maybe_release(Op* op) {
  if (op->released || !is_terminal(op->state) || op->outstanding != 0 || op->in_flush) return;
  op->released = true;
  if (op->started) {
    op->started = false;
    --started_ops_;
  }
  regions_.release(op->region);
  --live_ops_;
  free_ops_.push_back(op);
  start_waiting_ops();
}

void OpEngine::start_waiting_ops() {
  if (starting_) return;  // an operation failing at start releases and calls back here: the loop goes on
  starting_ = true;
  while (waiting_head_ != nullptr && started_ops_ < options_.max_inflight) {
    Op* op = waiting_head_;
    unlink_waiting(op);
    start(op);
  }
  starting_ = false;
}

void OpEngine::unlink_waiting(Op* op) {
  Op** at = &waiting_head_;
  Op* prev = nullptr;
  while (*at != nullptr && *at != op) {
    prev = *at;
    at = &(*at)->waiting_next;
  }
  if (*at == nullptr) return;
  *at = op->waiting_next;
  if (waiting_tail_ == op) waiting_tail_ = prev;
  op->waiting_next = nullptr;
}

void OpEngine::unlink_deadline(Op* op) {
  if (!op->in_deadline_list) return;
  if (op->deadline_prev != nullptr) op->deadline_prev->deadline_next = op->deadline_next;
  else deadline_head_ = op->deadline_next;
  if (op->deadline_next != nullptr) op->deadline_next->deadline_prev = op->deadline_prev;
  else deadline_tail_ = op->deadline_prev;
  op->deadline_prev = op->deadline_next = nullptr;
  op->in_deadline_list = false;
}

void OpEngine::request_flush(Op* op) {
  auto it = peers_.find(op->rank);
  if (it == peers_.end()) return fail(op, make_error_code(Status::PEER_LOST));
  PeerState& p = it->second;
  op->in_flush = true;
  p.unflushed.push_back(op);
  if (p.flush_posted) return;
  // Submitted from a completion: the operations the other completions start next join it, and one
  // flush after the batch covers them all (a flush per put was ~10% of an 8 B put at depth 64).
  if (completing_) {
    p.flush_posted = true;
    deferred_flushes_.push_back(op->rank);
    return;
  }
  // A lone put is flushed now (no extra loop turn; on shared memory the flush completes inline).
  // With other operations going or flushes in flight, one deferred flush covers the whole burst
  // (a flush per put halved the 8-byte put rate at depth 64 over shm).
  if (p.inflight.empty() && started_ops_ <= 1) return flush_now(op->rank, op);
  p.flush_posted = true;
  asio::post(executor_, [this, rank = op->rank, life = std::weak_ptr<int>(life_)] {
    if (life.lock()) flush_now(rank, nullptr);
  });
}

// `current`: the operation whose request_flush runs this inline; its caller steps it.
void OpEngine::flush_now(std::uint32_t rank, Op* current) {
  auto it = peers_.find(rank);
  if (it == peers_.end()) return;
  PeerState& p = it->second;
  p.flush_posted = false;
  if (p.unflushed.empty()) return;
  FlushBatch* batch = nullptr;
  if (!free_batches_.empty()) {
    batch = free_batches_.back();
    free_batches_.pop_back();
  } else {
    batch = batches_.emplace_back(std::make_unique<FlushBatch>()).get();
  }
  batch->rank = rank;
  batch->live = true;
  batch->ops.swap(p.unflushed);  // both keep their capacity
  const PostResult r = poster_.post_flush(rank, post_id_of(batch, true));
  if (!r.pending) return flush_done(batch, r.error, current);
  p.inflight.push_back(batch);
  ++all_posts_;
  ++live_posts_;
  poster_.kick();
}

void OpEngine::flush_done(FlushBatch* batch, error_code ec, Op* current) {
  for (Op* op : batch->ops) {
    op->in_flush = false;
    op->flushed = true;
    if (ec) fail(op, ec);
    if (op != current) step(op);
  }
  batch->ops.clear();
  free_batches_.push_back(batch);
}

void OpEngine::completed(PostId token, error_code ec) {
  --all_posts_;
  if ((token & 1u) != 0) {
    auto* batch = reinterpret_cast<FlushBatch*>(static_cast<std::uintptr_t>(token & ~PostId{1}));
    if (batch->live) {
      --live_posts_;
      if (auto it = peers_.find(batch->rank); it != peers_.end()) std::erase(it->second.inflight, batch);
    }
    return flush_done(batch, ec, nullptr);
  }
  auto* op = reinterpret_cast<Op*>(static_cast<std::uintptr_t>(token));
  --op->outstanding;
  if (!op->orphaned) --live_posts_;
  if (ec) fail(op, ec);
  step(op);
}

void OpEngine::peer_added(std::uint32_t rank) { peers_[rank]; }

void OpEngine::peer_removed(std::uint32_t rank, error_code reason) {
  std::vector<Op*> affected;
  auto it = peers_.find(rank);
  if (it != peers_.end()) {
    PeerState& p = it->second;
    for (Op* op : p.unflushed) op->in_flush = false;  // that flush is never posted now
    for (FlushBatch* batch : p.inflight) {
      // A force-closed endpoint may never report it: it stops counting and its ops leave it.
      batch->live = false;
      --live_posts_;
      for (Op* op : batch->ops) op->in_flush = false;
      batch->ops.clear();
    }
    peers_.erase(it);
  }
  for (const auto& owned : ops_) {
    Op* op = owned.get();
    if (op->rank == rank) op->peer = nullptr;  // its PeerState is gone
    if (op->released || op->rank != rank || op->orphaned) continue;
    op->orphaned = true;
    live_posts_ -= op->outstanding;
    if (op->started) {  // what the dead endpoint still holds no longer blocks other peers' operations
      op->started = false;
      --started_ops_;
    }
    affected.push_back(op);
  }
  for (Op* op : affected) terminal(op, OpState::aborted, reason);
  for (Op* op : affected) maybe_release(op);
  start_waiting_ops();
}

void OpEngine::arm_deadline_timer() {
  if (deadline_timer_armed_ || deadline_head_ == nullptr) return;
  deadline_timer_armed_ = true;
  deadline_timer_.expires_at(deadline_head_->deadline);
  deadline_timer_.async_wait([this, life = std::weak_ptr<int>(life_)](error_code ec) {
    if (!life.lock()) return;
    deadline_timer_armed_ = false;
    if (!ec) expire_deadlines();
    arm_deadline_timer();
  });
}

void OpEngine::expire_deadlines() {
  const auto now = runtime::steady_clock::now();
  while (deadline_head_ != nullptr && deadline_head_->deadline <= now) {
    Op* op = deadline_head_;
    // Posts cannot be taken back: the caller hears now, the record lives until they are reported.
    // An operation already failing reports its own error rather than the timeout.
    if (op->error) {
      terminal(op, OpState::failed, op->error);
    } else {
      terminal(op, OpState::timed_out, make_error_code(Status::TIMEOUT));
    }
    maybe_release(op);
  }
}

}  // namespace hmc::detail
