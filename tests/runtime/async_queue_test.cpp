// AsyncQueue: every completion style, FIFO order, timeouts, cancellation, close.
#include <gtest/gtest.h>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "hmc/runtime/async_queue.hpp"
#include "hmc/runtime/event_loop.hpp"

namespace hmc::runtime {
namespace {

using namespace std::chrono_literals;
using Queue = AsyncQueue<std::string>;

// Runs a coroutine on the loop and waits for it from the test thread.
template <class T>
T run_on(EventLoop& loop, asio::awaitable<T> aw) {
  auto f = asio::co_spawn(loop.executor(), std::move(aw), asio::use_future);
  if (f.wait_for(20s) != std::future_status::ready) throw std::runtime_error("coroutine did not finish in 20 s");
  return f.get();
}

class AsyncQueueTest : public ::testing::Test {
 protected:
  void SetUp() override { loop.start(); }
  void push(Queue& q, std::string v) {
    std::promise<void> p;
    loop.submit([&] {
      q.push(std::move(v));
      p.set_value();
    });
    p.get_future().wait();
  }
  EventLoop loop;
};

TEST_F(AsyncQueueTest, AwaitableGetsBufferedItemsInOrder) {
  Queue q(loop.executor());
  push(q, "a");
  push(q, "b");
  auto got = run_on(loop, [&]() -> asio::awaitable<std::string> {
    auto first = co_await q.async_pop(1s, asio::use_awaitable);
    auto second = co_await q.async_pop(1s, asio::use_awaitable);
    co_return first + second;
  }());
  EXPECT_EQ(got, "ab");
}

TEST_F(AsyncQueueTest, TakeIfRemovesMatchesUpToItsLimitAndTheRestKeepTheirOrder) {
  Queue q(loop.executor());
  for (const char* v : {"a", "x1", "b", "x2", "x3", "c"}) push(q, v);
  std::promise<std::vector<std::string>> taken;
  loop.submit([&] { taken.set_value(q.take_if([](const std::string& v) { return v[0] == 'x'; }, 2)); });
  EXPECT_EQ(taken.get_future().get(), (std::vector<std::string>{"x1", "x2"}));
  std::string rest;
  for (int i = 0; i < 4; ++i) rest += q.async_pop(1s, asio::use_future).get();
  EXPECT_EQ(rest, "abx3c");
}

TEST_F(AsyncQueueTest, WaitersAreServedFirstComeFirstServed) {
  Queue q(loop.executor());
  auto f1 = q.async_pop(5s, asio::use_future);
  auto f2 = q.async_pop(5s, asio::use_future);
  // Waiters register on the loop in order; push after they are queued.
  std::promise<void> queued;
  loop.submit([&] { queued.set_value(); });
  queued.get_future().wait();
  push(q, "x");
  push(q, "y");
  EXPECT_EQ(f1.get(), "x");
  EXPECT_EQ(f2.get(), "y");
}

TEST_F(AsyncQueueTest, FutureTimesOutWithTimedOut) {
  Queue q(loop.executor());
  auto start = std::chrono::steady_clock::now();
  auto f = q.async_pop(30ms, asio::use_future);
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  try {
    f.get();
    FAIL() << "pop on an empty queue must time out";
  } catch (const boost::system::system_error& e) {
    EXPECT_EQ(e.code(), asio::error::timed_out);
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, 30ms);
}

TEST_F(AsyncQueueTest, CallbackStyleReceivesValueAndCode) {
  Queue q(loop.executor());
  std::promise<std::pair<error_code, std::string>> got;
  q.async_pop(1s, [&](error_code ec, std::string v) { got.set_value({ec, v}); });
  push(q, "cb");
  auto [ec, v] = got.get_future().get();
  EXPECT_FALSE(ec);
  EXPECT_EQ(v, "cb");
}

TEST_F(AsyncQueueTest, CancellationSlotAbortsOnlyThatWaiter) {
  Queue q(loop.executor());
  asio::cancellation_signal cancel;
  std::promise<error_code> aborted;
  loop.submit([&] {
    q.async_pop(kNoTimeout, asio::bind_cancellation_slot(cancel.slot(),
                                                         [&](error_code ec, std::string) { aborted.set_value(ec); }));
  });
  auto other = q.async_pop(5s, asio::use_future);
  loop.submit([&] { cancel.emit(asio::cancellation_type::terminal); });
  auto f = aborted.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(f.get(), asio::error::operation_aborted);
  push(q, "kept");
  EXPECT_EQ(other.get(), "kept");  // the value went to the live waiter, not the cancelled one
}

TEST_F(AsyncQueueTest, TimerRaceCancelsPopWithoutLosingTheNextItem) {
  using namespace asio::experimental::awaitable_operators;
  Queue q(loop.executor());
  auto result = run_on(loop, [&]() -> asio::awaitable<std::string> {
    asio::steady_timer t(loop.executor(), 20ms);
    auto r = co_await (q.async_pop(kNoTimeout, asio::use_awaitable) || t.async_wait(asio::use_awaitable));
    if (r.index() == 0) co_return std::string("pop won unexpectedly");
    q.push("after");
    co_return co_await q.async_pop(1s, asio::use_awaitable);
  }());
  EXPECT_EQ(result, "after");
}

TEST_F(AsyncQueueTest, CloseDrainsBufferedItemsThenFails) {
  Queue q(loop.executor());
  push(q, "last");
  std::promise<void> closed;
  loop.submit([&] {
    q.close(asio::error::connection_reset);
    closed.set_value();
  });
  closed.get_future().wait();
  EXPECT_EQ(q.async_pop(1s, asio::use_future).get(), "last");
  try {
    q.async_pop(1s, asio::use_future).get();
    FAIL() << "pop after close must fail";
  } catch (const boost::system::system_error& e) {
    EXPECT_EQ(e.code(), asio::error::connection_reset);
  }
}

TEST_F(AsyncQueueTest, CloseFailsPendingWaiters) {
  Queue q(loop.executor());
  auto f = q.async_pop(kNoTimeout, asio::use_future);
  std::promise<void> queued;
  loop.submit([&] { queued.set_value(); });
  queued.get_future().wait();
  loop.submit([&] { q.close(asio::error::eof); });
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_THROW(f.get(), boost::system::system_error);
}

}  // namespace
}  // namespace hmc::runtime
