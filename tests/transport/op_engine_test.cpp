// The shared op engine over an EMULATED transport (a scripted OpPoster, no bytes move): the
// engine's state machine is checked where real UCX cannot be made to fail on demand (a batch whose
// k-th segment is refused, a completion that arrives after its peer was removed or never at all).
// The same seam is where a verbs transport plugs in. Real-UCX behaviour is in tests/session/.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <deque>
#include <functional>
#include <new>
#include <optional>

#include "hmc/error.hpp"
#include "transport/op_engine.hpp"

// Counts this binary's allocations while a test asks for it (the engine's steady state).
namespace {
std::atomic<bool> g_counting{false};
std::atomic<std::size_t> g_allocations{0};
}  // namespace

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"  // these three are the matching set
void* operator new(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace hmc::detail {
namespace {

using namespace std::chrono_literals;

struct Post {
  enum Kind { rma, flush, message, notify } kind;
  std::uint32_t rank;
  bool is_put;
  Segment segment;
  PostId token;
};

// Records every post; the test decides when (and whether) each signalled one completes.
class EmulatedPoster final : public OpPoster {
 public:
  PostResult post_rma(std::uint32_t rank, bool is_put, std::uint64_t, const Segment& s, PostId token) override {
    if (fail_after && posts.size() >= *fail_after) return {make_error_code(Status::ERROR), false};
    posts.push_back({Post::rma, rank, is_put, s, token});
    return {{}, token != kNoPostId};
  }
  PostResult post_flush(std::uint32_t rank, PostId token) override {
    posts.push_back({Post::flush, rank, true, {}, flush_inline ? kNoPostId : token});
    return {{}, !flush_inline};
  }
  PostResult post_message(std::uint32_t rank, std::span<const std::byte>, PostId token) override {
    posts.push_back({Post::message, rank, false, {}, token});
    return {{}, true};
  }
  PostResult post_notify(std::uint32_t rank, std::span<const std::byte>, PostId token) override {
    if (refuse_notify) return {make_error_code(Status::PEER_LOST), false};
    posts.push_back({Post::notify, rank, true, {}, token});
    return {{}, true};
  }
  void kick() override {}

  std::size_t count(Post::Kind k) const {
    std::size_t n = 0;
    for (const auto& p : posts) n += p.kind == k ? 1 : 0;
    return n;
  }
  std::vector<Post> posts;
  std::optional<std::size_t> fail_after;  // refuse every post once this many were made
  bool refuse_notify = false;
  bool flush_inline = false;  // flushes complete at once (UCX on shared memory)
};

class OpEngineTest : public ::testing::Test {
 protected:
  void make(EngineOptions o = {30s, 1024}) {
    engine.emplace(io.get_executor(), poster, regions, o);
    engine->peer_added(1);
  }
  // A request whose spans stay valid through submit().
  struct Req {
    Req(OpKind k, std::uint32_t r, std::vector<Segment> s, std::size_t c = 0, std::size_t w = 0,
        std::vector<std::byte> m = {})
        : kind(k), rank(r), segments(std::move(s)), chunk(c), window(w), message(std::move(m)) {}
    OpKind kind;
    std::uint32_t rank;
    std::vector<Segment> segments;
    std::size_t chunk, window;
    std::vector<std::byte> message;
  };
  std::shared_ptr<std::optional<error_code>> submit(const Req& q) {
    OpRequest r;
    r.rank = q.rank;
    r.kind = q.kind;
    r.segments = q.segments;
    r.chunk = q.chunk;
    r.window = q.window;
    r.message = q.message;
    return submit(r);
  }
  // Submits and returns a slot that holds the result once the completion ran.
  std::shared_ptr<std::optional<error_code>> submit(const OpRequest& r) {
    auto result = std::make_shared<std::optional<error_code>>();
    engine->submit(r, [result](error_code ec) {
      EXPECT_FALSE(result->has_value()) << "a completion ran twice";
      *result = ec;
    });
    return result;
  }
  static Req pipeline(bool is_put, std::size_t size, std::size_t chunk, std::size_t window) {
    return Req{is_put ? OpKind::put : OpKind::get, 1, {Segment{0, 0, size}}, chunk, window, {}};
  }
  void settle() {
    io.restart();
    io.poll();
  }
  // Completes the signalled posts made so far (not those they cause) that were not completed yet.
  void complete_all(error_code ec = {}) {
    for (const std::size_t end = poster.posts.size(); completed_ < end; ++completed_)
      if (poster.posts[completed_].token != kNoPostId) engine->completed(poster.posts[completed_].token, ec);
    settle();
  }

  runtime::asio::io_context io;
  EmulatedPoster poster;
  RegionTable regions{[](void*) {}};
  std::optional<OpEngine> engine;
  std::size_t completed_ = 0;
};

TEST_F(OpEngineTest, PutsShareOneFlushAndCompleteOnlyAfterIt) {
  make();
  std::vector<std::shared_ptr<std::optional<error_code>>> results;
  for (int i = 0; i < 10; ++i) results.push_back(submit(Req{OpKind::put, 1, {Segment{0, 0, 8}}}));
  ASSERT_EQ(poster.count(Post::flush), 1u) << "the first put's flush leaves at once (no extra loop turn)";
  EXPECT_EQ(poster.posts[1].kind, Post::flush);
  settle();  // the deferred flush runs after the burst
  EXPECT_EQ(poster.count(Post::rma), 10u);
  EXPECT_EQ(poster.count(Post::flush), 2u) << "the rest of the burst shares one flush";
  for (const auto& r : results) EXPECT_FALSE(r->has_value()) << "a put completed before its flush";
  complete_all();
  for (const auto& r : results) ASSERT_TRUE(r->has_value() && !**r);
  EXPECT_EQ(engine->live_operations(), 0u);
  EXPECT_FALSE(engine->has_pending());
}

TEST_F(OpEngineTest, PipelineKeepsItsWindowAndEndsWithOneFlush) {
  make();
  auto result = submit(pipeline(true, 10 * 100 + 7, 100, 3));
  EXPECT_EQ(poster.count(Post::rma), 3u);
  std::size_t bytes = 0;
  while (!result->has_value()) {
    complete_all();
    EXPECT_LE(poster.count(Post::rma) - completed_ + poster.count(Post::flush), 3u + 1u);
    ASSERT_LT(poster.posts.size(), 100u);
  }
  for (const auto& p : poster.posts) bytes += p.kind == Post::rma ? p.segment.size : 0;
  EXPECT_EQ(bytes, 1007u);
  EXPECT_EQ(poster.count(Post::flush), 1u);
  EXPECT_EQ(poster.posts.back().kind, Post::flush);
  EXPECT_FALSE(**result);
}

// A chunk that completes after its peer was removed must not post anything (a lookup of the
// removed peer would throw std::out_of_range from the poller and end the process).
TEST_F(OpEngineTest, CompletionAfterPeerRemovalPostsNothing) {
  make();
  auto result = submit(pipeline(false, 1000, 10, 4));
  ASSERT_EQ(poster.count(Post::rma), 4u);
  engine->peer_removed(1, make_error_code(Status::PEER_LOST));
  settle();
  ASSERT_TRUE(result->has_value());
  EXPECT_EQ(status_of(**result), Status::PEER_LOST);
  complete_all();  // the dead endpoint reports its chunks after all, successfully
  EXPECT_EQ(poster.posts.size(), 4u) << "posted for an operation whose peer is gone";
  EXPECT_EQ(engine->live_operations(), 0u);
}

// After TimeoutError nothing more is posted; what was in flight may still complete.
TEST_F(OpEngineTest, TimedOutPipelinePostsNothingMore) {
  make({50ms, 1024});
  auto result = submit(pipeline(false, 1 << 20, 64, 2));
  ASSERT_EQ(poster.count(Post::rma), 2u);
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (!result->has_value() && std::chrono::steady_clock::now() < until) io.run_one_for(10ms);
  ASSERT_TRUE(result->has_value());
  EXPECT_EQ(status_of(**result), Status::TIMEOUT);
  complete_all();
  EXPECT_EQ(poster.count(Post::rma), 2u) << "chunks posted after the timeout was reported";
  EXPECT_EQ(engine->live_operations(), 0u);
}

// Posts a removed peer's endpoint never returns must not keep the loop's safety timer.
TEST_F(OpEngineTest, NothingPendingAfterPeerLossEvenIfItsPostsNeverReturn) {
  make();
  auto get = submit(pipeline(false, 1000, 10, 4));
  auto p = submit(Req{OpKind::put, 1, {Segment{0, 0, 8}}});
  settle();
  EXPECT_TRUE(engine->has_pending());
  engine->peer_removed(1, make_error_code(Status::PEER_LOST));
  settle();
  EXPECT_TRUE(get->has_value() && p->has_value());
  EXPECT_FALSE(engine->has_pending()) << "lost posts still count as pending";
  EXPECT_GT(engine->posts_outstanding(), 0u);  // they are still waited for at teardown
  EXPECT_EQ(engine->live_operations(), 1u);    // the get's record until its chunks return
}

// A batch whose segment k is refused must not complete while segments 0..k-1 may still
// read the caller's memory: it fails only after the flush that covers them.
TEST_F(OpEngineTest, BatchWithARefusedSegmentFailsOnlyAfterTheEarlierOnesAreFlushed) {
  make();
  poster.fail_after = 3;
  auto result = submit(Req{OpKind::put, 1, {{0, 0, 8}, {8, 8, 8}, {16, 16, 8}, {24, 24, 8}, {32, 32, 8}}});
  settle();
  ASSERT_EQ(poster.count(Post::rma), 3u);
  poster.fail_after.reset();
  ASSERT_EQ(poster.count(Post::flush), 1u) << "no flush for the segments already posted";
  EXPECT_FALSE(result->has_value()) << "completed while 3 segments may still read the buffer";
  complete_all();
  ASSERT_TRUE(result->has_value());
  EXPECT_EQ(status_of(**result), Status::ERROR);
}

TEST_F(OpEngineTest, OverMaxInflightOperationsWaitInOrderAndTimeOutInTheQueue) {
  make({200ms, 2});
  std::vector<std::shared_ptr<std::optional<error_code>>> gets;
  for (int i = 0; i < 5; ++i) {
    gets.push_back(submit(Req{OpKind::get, 1, {Segment{static_cast<std::size_t>(i), 0, 1}}}));
  }
  ASSERT_EQ(poster.count(Post::rma), 2u);
  complete_all();
  ASSERT_EQ(poster.count(Post::rma), 4u);
  EXPECT_EQ(poster.posts[2].segment.local_offset, 2u) << "FIFO order";
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (!gets[4]->has_value() && std::chrono::steady_clock::now() < until) io.run_one_for(10ms);
  ASSERT_TRUE(gets[4]->has_value());
  EXPECT_EQ(status_of(**gets[4]), Status::TIMEOUT);
  complete_all();
  EXPECT_EQ(poster.count(Post::rma), 4u) << "a timed-out queued operation was started";
  for (int i = 0; i < 2; ++i) EXPECT_FALSE(**gets[i]);
}

TEST_F(OpEngineTest, UnknownPeerAndMessagesReachOneTerminalState) {
  make();
  auto sent = submit(Req{OpKind::message, 1, {}, 0, 0, {std::byte{1}}});
  auto refused = submit(Req{OpKind::message, 7, {}, 0, 0, {std::byte{1}}});
  settle();
  ASSERT_TRUE(refused->has_value());
  EXPECT_EQ(status_of(**refused), Status::PEER_LOST);
  EXPECT_FALSE(sent->has_value());
  complete_all(make_error_code(Status::PEER_LOST));
  ASSERT_TRUE(sent->has_value());
  EXPECT_EQ(status_of(**sent), Status::PEER_LOST);
}

// Put-with-notify is the puts, then one notify post (which covers their flush), and one
// completion once the notify is reported.
TEST_F(OpEngineTest, PutNotifyPostsItsPutsThenOneNotifyAndCompletesWhenItIsReported) {
  make();
  auto result = submit(Req{OpKind::put_notify, 1, {{0, 0, 8}, {8, 64, 8}}, 0, 0, {std::byte{7}}});
  settle();
  ASSERT_EQ(poster.posts.size(), 3u);
  EXPECT_EQ(poster.posts[0].kind, Post::rma);
  EXPECT_EQ(poster.posts[1].kind, Post::rma);
  EXPECT_EQ(poster.posts[2].kind, Post::notify);
  EXPECT_EQ(poster.count(Post::flush), 0u) << "the notify covers the flush";
  EXPECT_FALSE(result->has_value());
  complete_all();
  ASSERT_TRUE(result->has_value());
  EXPECT_FALSE(**result);
  EXPECT_EQ(engine->live_operations(), 0u);
}

// A refused notify fails the operation, but only after the puts already posted are flushed.
TEST_F(OpEngineTest, RefusedNotifyFailsOnlyAfterItsPutsAreFlushed) {
  make();
  poster.refuse_notify = true;
  auto result = submit(Req{OpKind::put_notify, 1, {{0, 0, 8}}, 0, 0, {std::byte{7}}});
  settle();
  ASSERT_EQ(poster.count(Post::flush), 1u);
  EXPECT_FALSE(result->has_value()) << "completed while the put may still read the buffer";
  complete_all();
  ASSERT_TRUE(result->has_value());
  EXPECT_EQ(status_of(**result), Status::PEER_LOST);
}

TEST_F(OpEngineTest, PutNotifyToALostPeerOrPastItsDeadlineEndsTyped) {
  make({50ms, 1024});
  auto lost = submit(Req{OpKind::put_notify, 7, {{0, 0, 8}}, 0, 0, {std::byte{7}}});
  auto slow = submit(Req{OpKind::put_notify, 1, {{0, 0, 8}}, 0, 0, {std::byte{7}}});
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (!slow->has_value() && std::chrono::steady_clock::now() < until) io.run_one_for(10ms);
  ASSERT_TRUE(lost->has_value() && slow->has_value());
  EXPECT_EQ(status_of(**lost), Status::PEER_LOST);
  EXPECT_EQ(status_of(**slow), Status::TIMEOUT);
  complete_all();
  EXPECT_EQ(engine->live_operations(), 0u);
}

// Once warm, a put costs no allocation in the engine and no new record, whether its
// flush completes inline (shared memory) or later (tcp).
TEST_F(OpEngineTest, SteadyStatePutsAllocateNothingAndReuseTheirRecords) {
  make();
  constexpr int kOps = 1000;
  for (bool inline_flush : {true, false}) {
    SCOPED_TRACE(inline_flush);
    poster.flush_inline = inline_flush;
    const Req put{OpKind::put, 1, {Segment{0, 0, 8}}};
    std::vector<OpEngine::Completion> done;  // made before counting: they are the caller's
    int completed = 0;
    for (int i = 0; i < 2 * kOps; ++i) done.emplace_back([&completed](error_code ec) { completed += ec ? 0 : 1; });
    OpRequest r;
    r.rank = put.rank;
    r.segments = put.segments;
    auto run = [&](int from, int to) {
      for (int i = from; i < to; ++i) {
        engine->submit(r, std::move(done[static_cast<std::size_t>(i)]));
        complete_all();
      }
    };
    run(0, kOps);  // warm-up
    poster.posts.reserve(poster.posts.size() + 4 * kOps);
    const std::size_t records = engine->records();
    g_allocations = 0;
    g_counting = true;
    run(kOps, 2 * kOps);
    g_counting = false;
    EXPECT_EQ(completed, 2 * kOps);
    EXPECT_EQ(engine->records(), records) << "the record pool grew";
    EXPECT_EQ(g_allocations.load(), 0u) << "allocations for " << kOps << " puts";
  }
}

// Puts that completions submit (coroutines at depth D resuming one after another) share
// one flush after those completions ran, not one flush each, and none completes before it.
TEST_F(OpEngineTest, PutsSubmittedByCompletionsShareOneFlushAfterThem) {
  make();
  poster.flush_inline = true;  // shared memory: each lone put would be flushed at once
  constexpr int kLanes = 8, kRounds = 4;
  OpRequest r;
  r.rank = 1;
  const Segment seg{0, 0, 8};
  r.segments = {&seg, 1};
  int completed = 0;
  std::size_t first_round_flushes = 0;
  std::function<void(int)> lane = [&](int round) {
    engine->submit(r, [&, round](error_code ec) {
      EXPECT_FALSE(ec);
      ++completed;
      if (round == 0 && first_round_flushes == 0) first_round_flushes = poster.count(Post::flush);
      if (round + 1 < kRounds) lane(round + 1);
    });
  };
  for (int i = 0; i < kLanes; ++i) lane(0);
  settle();
  EXPECT_EQ(completed, kLanes * kRounds);
  EXPECT_EQ(poster.count(Post::rma), static_cast<std::size_t>(kLanes * kRounds));
  EXPECT_EQ(poster.count(Post::flush) - first_round_flushes, static_cast<std::size_t>(kRounds - 1))
      << "one flush per round of completions";
  EXPECT_EQ(engine->live_operations(), 0u);
}

// Completions found in one loop turn run from one post, in the order their operations
// ended, never inside submit(); a throwing completion loses none of the others; an engine destroyed
// with completions still queued hands them to the loop.
TEST_F(OpEngineTest, CompletionsRunLaterInOrderFromOnePost) {
  make();
  poster.flush_inline = true;
  std::vector<int> order;
  OpRequest r;
  r.rank = 1;
  const Segment seg{0, 0, 8};
  r.segments = {&seg, 1};
  for (int i = 0; i < 3; ++i) engine->submit(r, [&order, i](error_code ec) { order.push_back(ec ? -1 : i); });
  EXPECT_TRUE(order.empty()) << "a completion ran inside submit()";
  io.restart();
  while (order.empty() && io.poll_one() != 0) {
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2})) << "the first handler that ran a completion ran them all";
}

TEST_F(OpEngineTest, AThrowingCompletionLosesNoOther) {
  make();
  poster.flush_inline = true;
  std::vector<int> order;
  OpRequest r;
  r.rank = 1;
  const Segment seg{0, 0, 8};
  r.segments = {&seg, 1};
  engine->submit(r, [&order](error_code) {
    order.push_back(0);
    throw std::runtime_error("from a completion");
  });
  for (int i = 1; i < 3; ++i) engine->submit(r, [&order, i](error_code) { order.push_back(i); });
  io.restart();
  EXPECT_THROW(io.poll(), std::runtime_error);
  settle();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
}

TEST_F(OpEngineTest, DestroyedEngineStillRunsTheCompletionsItOwed) {
  make();
  poster.flush_inline = true;
  auto done = submit(Req{OpKind::put, 1, {Segment{0, 0, 8}}});  // flushed inline: done, not yet told
  poster.flush_inline = false;
  auto pending = submit(Req{OpKind::put, 1, {Segment{0, 0, 8}}});
  engine.reset();
  settle();
  ASSERT_TRUE(done->has_value());
  EXPECT_FALSE(**done);
  ASSERT_TRUE(pending->has_value());
  EXPECT_EQ(status_of(**pending), Status::CLOSED);
}

}  // namespace
}  // namespace hmc::detail
