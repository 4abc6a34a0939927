// EventLoop: reactor backend, owned thread vs caller's thread, cross-thread submission.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <filesystem>
#include <functional>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "hmc/runtime/event_loop.hpp"

namespace hmc::runtime {
namespace {

using namespace std::chrono_literals;

// Whether a thread of this process (a Linux tid) still exists.
bool thread_alive(pid_t tid) { return std::filesystem::exists("/proc/self/task/" + std::to_string(tid)); }

bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds limit = 5s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return pred();
}

TEST(EventLoop, ReportsTheConfiguredReactor) {
#if defined(HMC_ASIO_IO_URING)
  EXPECT_EQ(EventLoop::backend(), "io_uring");
  EXPECT_TRUE(EventLoop::uring_cancel_fix());
#else
  EXPECT_EQ(EventLoop::backend(), "epoll");
#endif
}

TEST(EventLoop, OwnedThreadRunsHandlersOffTheCaller) {
  EventLoop loop;
  loop.start();
  std::promise<std::thread::id> ran_on;
  loop.submit([&] { ran_on.set_value(std::this_thread::get_id()); });
  auto f = ran_on.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_NE(f.get(), std::this_thread::get_id());
  EXPECT_FALSE(loop.in_loop_thread());
}

TEST(EventLoop, CallerThreadCanRunTheLoop) {
  EventLoop loop;
  bool inside = false;
  std::thread stopper;
  loop.submit([&] {
    inside = loop.in_loop_thread();
    stopper = std::thread([&] { loop.stop(); });
  });
  loop.run();  // returns once stop() is called from the other thread
  stopper.join();
  EXPECT_TRUE(inside);
}

TEST(EventLoop, SubmitOnTheLoopThreadRunsInline) {
  EventLoop loop;
  loop.start();
  std::promise<bool> inline_ran;
  loop.submit([&] {
    bool ran = false;
    loop.submit([&] { ran = true; });
    inline_ran.set_value(ran);
  });
  auto f = inline_ran.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_TRUE(f.get());
}

TEST(EventLoop, FourThreadsSubmitConcurrentlyInOrderPerThread) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 50'000;
  EventLoop loop;
  loop.start();
  // Touched only on the loop thread: no atomics needed if submission really hops to the loop.
  std::array<int, kThreads> last{};
  last.fill(-1);
  long total = 0;
  bool order_ok = true;
  bool all_on_loop = true;
  std::vector<std::thread> producers;
  for (int t = 0; t < kThreads; ++t) {
    producers.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        loop.submit([&, t, i] {
          all_on_loop = all_on_loop && loop.in_loop_thread();
          order_ok = order_ok && (i == last[static_cast<std::size_t>(t)] + 1);
          last[static_cast<std::size_t>(t)] = i;
          ++total;
        });
      }
    });
  }
  for (auto& p : producers) p.join();
  std::promise<long> done;
  loop.submit([&] { done.set_value(total); });
  auto f = done.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(f.get(), long{kThreads} * kPerThread);
  loop.stop();
  EXPECT_TRUE(order_ok);
  EXPECT_TRUE(all_on_loop);
}

TEST(EventLoop, CallRunsOnTheLoopAndReturnsOrRethrows) {
  EventLoop loop;
  // No thread runs the loop yet: call() runs inline, nothing else can touch loop state.
  EXPECT_EQ(loop.call([] { return std::this_thread::get_id(); }), std::this_thread::get_id());
  loop.start();
  EXPECT_NE(loop.call([] { return std::this_thread::get_id(); }), std::this_thread::get_id());
  EXPECT_TRUE(loop.call([&] { return loop.in_loop_thread(); }));
  EXPECT_THROW(loop.call([]() -> int { throw std::invalid_argument("from the loop"); }), std::invalid_argument);
  loop.stop();
  EXPECT_EQ(loop.call([] { return 7; }), 7);  // stopped: inline again, never a hang
}

TEST(EventLoop, StopIsIdempotentAndDestructorJoins) {
  auto loop = std::make_unique<EventLoop>();
  loop->start();
  loop->stop();
  loop->stop();
  loop.reset();
  SUCCEED();
}

TEST(EventLoop, DestroyedByAHandlerItRunsFinishesAfterThatHandler) {
  auto loop = std::make_shared<EventLoop>();
  loop->start();
  EventLoop& l = *loop;
  const pid_t loop_tid = l.call([] { return ::gettid(); });
  std::promise<void> destroyed;
  std::atomic<bool> queued_ran{false};
  // The handler holds the last owner: the loop is destroyed on its own thread while run() is on the stack.
  l.submit([owner = std::move(loop), &destroyed, &l, &queued_ran]() mutable {
    asio::post(l.executor(), [&queued_ran] { queued_ran = true; });  // still queued when the loop dies
    owner.reset();
    destroyed.set_value();
  });
  auto f = destroyed.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(eventually([&] { return !thread_alive(loop_tid); })) << "the loop thread must end";
  EXPECT_TRUE(queued_ran.load()) << "completions queued at destruction run before the context dies";
}

}  // namespace
}  // namespace hmc::runtime
