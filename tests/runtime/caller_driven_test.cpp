// A loop without its own thread: run_until and poll on the callers' threads, one driver at a time,
// and the wakeup fd an outside selector sleeps on.
#include <gtest/gtest.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "eventfd_poller.hpp"
#include "hmc/runtime/event_loop.hpp"

namespace hmc::runtime {
namespace {

using namespace std::chrono_literals;
using test::EventfdPoller;

EventLoop::clock::time_point in(std::chrono::milliseconds d) { return EventLoop::clock::now() + d; }

bool readable(int fd, std::chrono::milliseconds wait = 0ms) {
  ::pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(wait.count())) == 1;
}

TEST(CallerDriven, RunUntilRunsHandlersOnTheCallersThread) {
  EventLoop loop;
  std::atomic<bool> done{false};
  std::thread::id ran_on;
  std::thread poster([&] {
    loop.submit([&] {
      ran_on = std::this_thread::get_id();
      done = true;
    });
  });
  poster.join();
  EXPECT_TRUE(loop.run_until([&] { return done.load(); }, in(5s)));
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_FALSE(loop.in_loop_thread()) << "only while driving";
  EXPECT_FALSE(loop.dedicated());
}

TEST(CallerDriven, RunUntilKeepsItsDeadline) {
  EventLoop loop;
  const auto start = EventLoop::clock::now();
  EXPECT_FALSE(loop.run_until([] { return false; }, in(50ms)));
  EXPECT_GE(EventLoop::clock::now() - start, 50ms);
}

TEST(CallerDriven, FourThreadsWaitingAtOnceHaveOneDriverAtATime) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 2000;
  EventLoop loop;
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> off_driver{0};
  std::array<std::atomic<int>, kThreads> completed{};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        std::atomic<bool> mine{false};
        loop.submit([&] {
          if (inside.fetch_add(1) != 0) ++overlaps;
          if (!loop.in_loop_thread()) ++off_driver;
          ++completed[static_cast<std::size_t>(t)];
          --inside;
          mine = true;  // last: once it is set the waiting thread may end, and `t` lives in its closure
        });
        // Each wait is satisfied by a handler that any of the four threads may run.
        if (!loop.run_until([&] { return mine.load(); }, in(20s))) return;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(completed[static_cast<std::size_t>(t)].load(), kPerThread);
  EXPECT_EQ(overlaps.load(), 0) << "two threads ran handlers at once";
  EXPECT_EQ(off_driver.load(), 0);
}

// A driver's sleep that a signal interrupts, on four drivers in turn. Asio's run_one_until on
// io_uring tags its kernel timeout with a stack address and, when the wait fails with EINTR, never
// cancels it: the timeout fires later while another thread drives, which runs the address as a
// handler (a segfault). Signals reach user threads in real programs (profilers, Python's handlers).
TEST(CallerDriven, InterruptedSleepsOnFourThreadsNeverLeaveAStaleTimeoutBehind) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 1000;
  struct sigaction quiet {};
  quiet.sa_handler = [](int) {};
  sigemptyset(&quiet.sa_mask);
  struct sigaction before {};
  ASSERT_EQ(::sigaction(SIGUSR1, &quiet, &before), 0);
  EventLoop loop;
  std::array<std::atomic<bool>, kThreads> running{};
  std::vector<pthread_t> handles(kThreads);
  std::mutex handles_mutex;  // a thread is signalled only while it has not ended
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      {
        std::lock_guard<std::mutex> lock(handles_mutex);
        handles[static_cast<std::size_t>(t)] = ::pthread_self();
        running[static_cast<std::size_t>(t)] = true;
      }
      for (int i = 0; i < kRounds; ++i) {
        const auto wait = std::chrono::microseconds(300 + 100 * ((i + t) % 7));
        (void)loop.run_until([] { return false; }, EventLoop::clock::now() + wait);
      }
      std::lock_guard<std::mutex> lock(handles_mutex);
      running[static_cast<std::size_t>(t)] = false;
    });
  }
  for (int k = 0;; ++k) {
    {
      std::lock_guard<std::mutex> lock(handles_mutex);
      const auto i = static_cast<std::size_t>(k % kThreads);
      if (running[i]) ::pthread_kill(handles[i], SIGUSR1);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(150));
    if (k > kThreads && std::none_of(running.begin(), running.end(), [](const auto& r) { return r.load(); })) break;
  }
  for (auto& th : threads) th.join();
  ::sigaction(SIGUSR1, &before, nullptr);
  std::atomic<bool> last{false};
  loop.submit([&] { last = true; });
  EXPECT_TRUE(loop.run_until([&] { return last.load(); }, in(5s))) << "the loop still runs handlers";
}

TEST(CallerDriven, ACompletionForAWaitingFollowerWakesIt) {
  EventLoop loop;
  std::atomic<bool> leader_done{false};
  std::atomic<bool> follower_done{false};
  std::promise<std::thread::id> driving;
  loop.submit([&] { driving.set_value(std::this_thread::get_id()); });
  std::thread leader([&] { loop.run_until([&] { return leader_done.load(); }, in(20s)); });
  const auto leader_id = leader.get_id();
  ASSERT_EQ(driving.get_future().get(), leader_id) << "the leader drives";
  bool follower_result = false;
  std::thread follower([&] { follower_result = loop.run_until([&] { return follower_done.load(); }, in(20s)); });
  loop.submit([&] { follower_done = true; });  // run by the leader; the follower must wake
  follower.join();
  EXPECT_TRUE(follower_result);
  EXPECT_FALSE(leader_done.load()) << "the follower returned while the leader still drove";
  loop.submit([&] { leader_done = true; });
  leader.join();
}

TEST(CallerDriven, AFollowerKeepsItsDeadlineAndTakesOverWhenTheLeaderLeaves) {
  EventLoop loop;
  std::atomic<bool> leader_done{false};
  std::promise<void> driving;
  loop.submit([&] { driving.set_value(); });
  std::thread leader([&] { loop.run_until([&] { return leader_done.load(); }, in(20s)); });
  driving.get_future().wait();
  EXPECT_FALSE(loop.run_until([] { return false; }, in(50ms))) << "a follower times out on its own deadline";
  std::atomic<bool> mine{false};
  std::thread follower([&] { loop.run_until([&] { return mine.load(); }, in(20s)); });
  std::this_thread::sleep_for(20ms);
  loop.submit([&] { leader_done = true; });
  leader.join();
  loop.submit([&] { mine = true; });  // nobody but the follower can run this now
  follower.join();
  EXPECT_TRUE(mine.load());
}

TEST(CallerDriven, PollRunsWhatIsReadyAndNeverBlocks) {
  EventLoop loop;
  EXPECT_EQ(loop.poll(), 0u);
  int ran = 0;
  for (int i = 0; i < 3; ++i) loop.submit([&] { ++ran; });
  EXPECT_EQ(loop.poll(), 3u);
  EXPECT_EQ(ran, 3);
}

TEST(CallerDriven, PollWithAStopConditionReturnsOnceItHoldsAndLeavesTheRestReadable) {
  EventLoop loop;
  const int fd = loop.wakeup_fd();
  int ran = 0;
  for (int i = 0; i < 10; ++i) loop.submit([&] { ++ran; });
  EXPECT_EQ(loop.poll([&] { return ran == 3; }), 3u);
  EXPECT_EQ(ran, 3);
  EXPECT_TRUE(readable(fd)) << "the handlers left behind are announced";
  EXPECT_EQ(loop.poll(), 7u);
  EXPECT_EQ(ran, 10);
}

// A spinning poller (poll mode; adaptive after activity) cycles once per poll(): an
// outside selector (asyncio) runs its own callbacks between two cycles instead of behind a batch of
// up to 256 of them (that was ~100 us per event-loop turn, several turns per awaited message), and
// the wakeup fd stays readable so the spin goes on in its next poll(). Work found is still taken
// in the same cycle.
TEST(CallerDriven, PollCyclesASpinningPollerOnceAndLeavesTheWakeupFdReadable) {
  {
    EventLoop loop(EventLoopOptions{ProgressMode::poll});
    const int fd = loop.wakeup_fd();
    EventfdPoller p;
    PollerHandle handle = loop.call([&] { return loop.attach(p); });
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(readable(fd));
      const long before = p.progress_calls.load();
      loop.poll();
      EXPECT_EQ(p.progress_calls.load() - before, 1) << "one cycle per poll()";
    }
    EXPECT_TRUE(readable(fd)) << "the spin goes on in the next poll()";
    EXPECT_EQ(p.arm_calls.load(), 0) << "a spinning poller never armed";
    p.add_work(3, /*signal=*/false);
    loop.poll();
    EXPECT_EQ(p.completed.load(), 3);
    loop.call([&] { handle.detach(); });
  }
}

// poll(stop, again) is for a selector that schedules its next pass itself (asyncio's call_soon):
// a spinning poller, or handlers left by a stop, set `again` and leave the wakeup fd alone (an
// eventfd write and read less per pass); a poller that arms says nothing.
TEST(CallerDriven, PollWithAgainTellsTheCallerInsteadOfTheWakeupFd) {
  EventLoopOptions poll_mode{ProgressMode::poll};
  EventLoop loop(poll_mode);
  const int fd = loop.wakeup_fd();
  EventfdPoller p;
  PollerHandle handle = loop.call([&] { return loop.attach(p); });
  bool again = false;
  loop.poll({}, again);  // reads the wakeup fd the call left readable
  for (int i = 0; i < 3; ++i) {
    const long before = p.progress_calls.load();
    again = false;
    loop.poll({}, again);
    EXPECT_TRUE(again) << "the spin goes on in the caller's next pass";
    EXPECT_EQ(p.progress_calls.load() - before, 1) << "one cycle per poll()";
    EXPECT_FALSE(readable(fd)) << "the wakeup fd is left for real events";
  }
  int ran = 0;
  loop.call([&] {
    for (int i = 0; i < 3; ++i) loop.submit([&] { ++ran; });
  });
  loop.poll({}, again);  // the call's own wakeup
  EXPECT_EQ(ran, 3);
  loop.call([&] { handle.detach(); });

  EventLoop event_loop(EventLoopOptions{ProgressMode::event});
  const int efd = event_loop.wakeup_fd();
  for (int i = 0; i < 2; ++i) event_loop.submit([&] { ++ran; });
  again = true;
  event_loop.poll([&] { return ran == 4; }, again);
  EXPECT_TRUE(again) << "stopped with a handler left";
  EXPECT_FALSE(readable(efd));
  event_loop.poll({}, again);
  EXPECT_FALSE(again) << "nothing left, no poller";
  EXPECT_EQ(ran, 5);
}

TEST(CallerDriven, CallRunsInlineWhileTheSeatIsFreeAndWakesTheSelectorAfter) {
  EventLoop loop;
  const int fd = loop.wakeup_fd();
  loop.poll();  // the wakeup fd starts quiet
  bool inside = false;
  const auto ran_on = loop.call([&] {
    inside = loop.in_loop_thread();  // the driver's seat: handlers may not run meanwhile
    loop.submit([] {});              // inline: this thread drives now
    return std::this_thread::get_id();
  });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_TRUE(inside);
  EXPECT_FALSE(loop.in_loop_thread()) << "the seat is given back";
  EXPECT_TRUE(readable(fd)) << "a selector hears of the call's work";
  EXPECT_THROW(loop.call([]() -> int { throw std::invalid_argument("inside"); }), std::invalid_argument);
  EXPECT_EQ(loop.call([] { return 5; }), 5) << "the seat was released by the exception";
}

TEST(CallerDriven, MisuseIsAnErrorNotAHang) {
  EventLoop loop;
  std::size_t nested_poll = 99;
  bool nested_run_until_threw = false;
  loop.submit([&] {
    nested_poll = loop.poll();
    try {
      loop.run_until([] { return true; }, in(1s));
    } catch (const std::logic_error&) {
      nested_run_until_threw = true;
    }
  });
  loop.poll();
  EXPECT_EQ(nested_poll, 0u);
  EXPECT_TRUE(nested_run_until_threw);

  EventLoop owned;
  owned.start();
  EXPECT_EQ(owned.poll(), 0u);
  EXPECT_THROW(owned.run_until([] { return true; }, in(1s)), std::logic_error);
  EXPECT_THROW(owned.wakeup_fd(), std::logic_error);
}

TEST(CallerDriven, CallDrivesTheLoopWhenNobodyElseDoes) {
  EventLoop loop;
  EXPECT_EQ(loop.call([] { return 7; }), 7);
  std::atomic<bool> stop{false};
  std::promise<void> driving;
  loop.submit([&] { driving.set_value(); });  // run by the leader once it holds the seat
  std::thread leader([&] { loop.run_until([&] { return stop.load(); }, in(20s)); });
  // Not a sleep: a leader slow to start (ASan, a loaded machine) left the seat free and call() ran inline.
  driving.get_future().wait();
  EXPECT_EQ(loop.call([] { return std::this_thread::get_id(); }), leader.get_id()) << "the driver runs it";
  loop.submit([&] { stop = true; });
  leader.join();
}

TEST(CallerDriven, WakeupFdTellsOfPostsTimersAndPollerFds) {
  EventLoop loop(EventLoopOptions{ProgressMode::event});
  const int fd = loop.wakeup_fd();
  EXPECT_EQ(loop.wakeup_fd(), fd);
  loop.poll();
  EXPECT_FALSE(readable(fd)) << "nothing to do";

  // A post from another thread.
  bool posted_ran = false;
  std::thread([&] { loop.submit([&] { posted_ran = true; }); }).join();
  EXPECT_TRUE(readable(fd, 5000ms));
  loop.poll();
  EXPECT_TRUE(posted_ran);
  EXPECT_FALSE(readable(fd));

  // A timer: the ring completes it; nothing else runs meanwhile.
  asio::steady_timer timer(loop.context(), 20ms);
  bool fired = false;
  loop.call([&] { timer.async_wait([&](error_code ec) { fired = !ec; }); });
  for (int i = 0; i < 100 && !fired; ++i) {
    ASSERT_TRUE(readable(fd, 5000ms));
    loop.poll();
  }
  EXPECT_TRUE(fired);

  // An attached poller, armed: a signal on its fd (from another thread) makes the wakeup fd readable.
  EventfdPoller p;
  PollerHandle handle = loop.call([&] { return loop.attach(p); });
  while (p.arm_calls.load() == 0) loop.poll();
  loop.poll();
  EXPECT_FALSE(readable(fd));
  std::thread([&] { p.add_work(2, /*signal=*/true); }).join();
  for (int i = 0; i < 100 && p.completed.load() < 2; ++i) {
    ASSERT_TRUE(readable(fd, 5000ms));
    loop.poll();
  }
  EXPECT_EQ(p.completed.load(), 2);
  loop.call([&] { handle.detach(); });
}

TEST(CallerDriven, DestroyedByAHandlerThatPollRuns) {
  auto loop = std::make_unique<EventLoop>();
  EventLoop& l = *loop;
  bool after = false;
  l.submit([&] {
    asio::post(l.executor(), [&after] { after = true; });
    loop.reset();  // inside poll(): the context is freed once poll() returns
  });
  l.poll();
  EXPECT_FALSE(loop);
  EXPECT_TRUE(after) << "completions queued at destruction run before the context dies";
}

TEST(CallerDriven, DestroyHandsTheTeardownToTheEndOfTheDriversRun) {
  auto loop = std::make_unique<EventLoop>();
  EventLoop& l = *loop;
  bool loop_alive_while_first_died = false;
  struct Probe {
    std::function<void()> on_death;
    ~Probe() { on_death(); }
  };
  auto probe = std::make_shared<Probe>();
  probe->on_death = [&] { loop_alive_while_first_died = l.stopped(); };  // reaches the loop: must be alive
  l.submit([&] { EventLoop::destroy(std::move(loop), std::move(probe)); });
  l.run_until([&] { return !loop; }, in(5s));
  EXPECT_FALSE(loop);
  EXPECT_TRUE(loop_alive_while_first_died);
}

// A selector watching the wakeup fd while another thread drives (a blocking call in asyncio's
// executor) must not spin: poll() turned away reads the fd empty, and the driver's leaving makes it
// readable again for the handlers it may have left.
TEST(CallerDriven, APollTurnedAwayLeavesTheWakeupFdQuietUntilTheDriverLeaves) {
  EventLoop loop;
  const int fd = loop.wakeup_fd();
  std::atomic<bool> leading{false}, release{false};
  std::thread driver([&] { loop.run_until([&] { return release.load(); }, in(10s)); });
  post_to_loop(loop.executor(), [&] { leading = true; });
  for (int i = 0; i < 1000 && !leading; ++i) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(leading.load());
  post_to_loop(loop.executor(), [] {});  // signals the fd; the driver runs it
  EXPECT_EQ(loop.poll(), 0u) << "another thread drives";
  std::this_thread::sleep_for(50ms);  // the driver reaps what the post woke it with
  EXPECT_FALSE(readable(fd)) << "a selector would spin on it";
  release = true;
  post_to_loop(loop.executor(), [] {});  // lets the driver see `release`
  driver.join();
  EXPECT_TRUE(readable(fd, 1000ms)) << "the driver left: the selector takes over";
  loop.poll();
}

// The keeper: a thread that drives a caller-driven loop whenever no caller does.
// Locals the handlers use are declared before the loop: its destruction joins the keeper first.
TEST(CallerDrivenKeeper, RunsWhatIsPostedWhileNoCallerDrives) {
  std::promise<std::thread::id> ran_on;
  auto f = ran_on.get_future();
  EventLoop loop;
  loop.start_keeper();
  EXPECT_FALSE(loop.dedicated()) << "callers may still drive it";
  asio::post(loop.executor(), [&] { ran_on.set_value(std::this_thread::get_id()); });
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready) << "nobody but the keeper drives it";
  EXPECT_NE(f.get(), std::this_thread::get_id());
}

TEST(CallerDrivenKeeper, StepsAsideForAWaitingCallerAndStaysOffWhileItDrives) {
  const auto me = std::this_thread::get_id();
  std::mutex m;
  std::vector<bool> by_me;  // who ran each step of an endless chain of handlers
  std::atomic<int> mine{0};
  std::atomic<bool> stop{false};
  std::function<void()> step;
  EventLoop loop;
  loop.start_keeper();
  step = [&] {
    {
      std::lock_guard<std::mutex> lock(m);
      by_me.push_back(std::this_thread::get_id() == me);
    }
    if (std::this_thread::get_id() == me) ++mine;
    if (!stop) asio::post(loop.executor(), step);
  };
  asio::post(loop.executor(), step);
  // The keeper runs the chain until this caller waits: then the caller drives until it is done.
  EXPECT_TRUE(loop.run_until([&] { return mine.load() >= 200; }, in(10s)));
  {
    std::lock_guard<std::mutex> lock(m);
    const auto first = std::find(by_me.begin(), by_me.end(), true);
    ASSERT_NE(first, by_me.end());
    EXPECT_TRUE(std::all_of(first, by_me.end(), [](bool b) { return b; }))
        << "no handler ran on the keeper while the caller drove";
  }
  // Once the caller is gone the keeper takes the chain back.
  const auto taken_back = [&] {
    std::lock_guard<std::mutex> lock(m);
    return !by_me.back();
  };
  for (int i = 0; i < 500 && !taken_back(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(taken_back());
  stop = true;
  loop.call([] {});  // the last step has run (on whoever drives) once this returns
}

// A std::future does not drive the loop: after a caller drove, work started with use_future must
// not wait out keeper_yield (an hour here; 10 x keeper_yield before the keeper could be nudged).
TEST(CallerDrivenKeeper, DrivesAtOnceForWorkAFutureWaitsFor) {
  EventLoopOptions o;
  o.keeper_yield = std::chrono::hours(1);
  EventLoop loop(o);
  loop.start_keeper();
  loop.call([] {});  // a caller drove just now: the keeper stays off for keeper_yield
  for (int i = 0; i < 3; ++i) {
    auto f = async_on_loop<void(int)>(
        loop.executor(), asio::use_future,
        [&](asio::any_completion_handler<void(int)> h) { complete_later(loop.executor(), std::move(h), i); });
    ASSERT_EQ(f.wait_for(10s), std::future_status::ready) << "round " << i << ": the keeper napped on";
    EXPECT_EQ(f.get(), i);
    loop.call([] {});  // the caller takes it back
  }
}

TEST(CallerDrivenKeeper, FourCallersAndTheKeeperNeverOverlap) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 500;
  std::atomic<int> inside{0}, overlaps{0}, ran{0};
  auto body = [&] {
    if (inside.fetch_add(1) != 0) ++overlaps;
    ++ran;
    inside.fetch_sub(1);
  };
  EventLoop loop;
  loop.start_keeper();
  std::vector<std::thread> callers;
  for (int t = 0; t < kThreads; ++t) {
    callers.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        loop.call(body);
        if (i % 50 == 0) std::this_thread::sleep_for(2ms);  // quiet spells: the keeper comes back
      }
    });
  }
  for (int i = 0; i < 2000; ++i) asio::post(loop.executor(), body);  // from outside: keeper or callers
  for (auto& c : callers) c.join();
  loop.run_until([&] { return ran.load() == kThreads * kPerThread + 2000; }, in(10s));
  EXPECT_EQ(ran.load(), kThreads * kPerThread + 2000);
  EXPECT_EQ(overlaps.load(), 0);
}

TEST(CallerDrivenKeeper, DestroyedByAHandlerTheKeeperRuns) {
  // A flag, not a promise: the keeper goes on after setting it while this test ends.
  auto gone = std::make_shared<std::atomic<bool>>(false);
  struct Probe {
    explicit Probe(std::shared_ptr<std::atomic<bool>> done) : flag(std::move(done)) {}
    ~Probe() { *flag = true; }
    std::shared_ptr<std::atomic<bool>> flag;
  };
  auto loop = std::make_unique<EventLoop>();
  EventLoop* l = loop.get();
  l->start_keeper();
  auto probe = std::make_shared<Probe>(gone);
  asio::post(l->executor(), [&loop, probe = std::move(probe)]() mutable {
    EventLoop::destroy(std::move(loop), std::move(probe));  // the keeper finishes it after this handler
  });
  for (int i = 0; i < 1000 && !*gone; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(gone->load());
  EXPECT_FALSE(loop);
}

}  // namespace
}  // namespace hmc::runtime
