// Poller driving: the arm contract in each progress mode, with a real eventfd as the wakeup fd.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "eventfd_poller.hpp"
#include "hmc/runtime/event_loop.hpp"

namespace hmc::runtime {
namespace {

using test::EventfdPoller;

using namespace std::chrono_literals;

bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds limit = 5s) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return pred();
}

// Attaches on the loop thread and returns the handle; detaches there too.
struct Attached {
  Attached(EventLoop& l, Poller& p) : loop(l) {
    std::promise<void> done;
    loop.submit([&] {
      handle = loop.attach(p);
      done.set_value();
    });
    done.get_future().wait();
  }
  ~Attached() {
    std::promise<void> done;
    loop.submit([&] {
      handle.detach();
      done.set_value();
    });
    done.get_future().wait();
  }
  EventLoop& loop;
  PollerHandle handle;
};

EventLoopOptions with_mode(ProgressMode m) {
  EventLoopOptions o;
  o.mode = m;
  return o;
}

TEST(Poller, BusyArmIsProgressedAgainBeforeSleeping) {
  EventLoop loop(with_mode(ProgressMode::event));
  loop.start();
  EventfdPoller p;
  p.busy_arms = 3;
  Attached a(loop, p);
  // Three busy arms, then one that succeeds: each busy answer is followed by progress.
  ASSERT_TRUE(eventually([&] { return p.arm_calls.load() >= 4; }));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(p.arm_calls.load(), 4);
  EXPECT_GE(p.progress_calls.load(), 4);
}

TEST(Poller, NothingSleepsWhileWorkIsPending) {
  EventLoop loop(with_mode(ProgressMode::event));
  loop.start();
  EventfdPoller p;
  p.add_work(10'000, /*signal=*/false);  // no wakeup at all: the driver must not sleep on it
  Attached a(loop, p);
  ASSERT_TRUE(eventually([&] { return p.completed.load() == 10'000; }, 2s));
}

TEST(Poller, EventModeSleepsWhenIdleAndWakesOnTheFd) {
  EventLoop loop(with_mode(ProgressMode::event));
  loop.start();
  EventfdPoller p;
  Attached a(loop, p);
  ASSERT_TRUE(eventually([&] { return p.arm_calls.load() >= 1; }));
  const long idle_progress = p.progress_calls.load();
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(p.progress_calls.load(), idle_progress) << "event mode must not spin while idle";
  std::thread producer([&] { p.add_work(5, /*signal=*/true); });
  producer.join();
  ASSERT_TRUE(eventually([&] { return p.completed.load() == 5; }));
}

TEST(Poller, SafetyTimerRecoversAMissedWakeupWhileWorkIsInFlight) {
  EventLoopOptions o = with_mode(ProgressMode::event);
  o.safety_interval = 5ms;
  EventLoop loop(o);
  loop.start();
  EventfdPoller p;
  p.pending = true;
  Attached a(loop, p);
  ASSERT_TRUE(eventually([&] { return p.arm_calls.load() >= 1; }));
  p.add_work(3, /*signal=*/false);  // the source "forgot" to signal, as UCX 1.13 sometimes does
  ASSERT_TRUE(eventually([&] { return p.completed.load() == 3; }, 2s));
}

TEST(Poller, WithoutWorkInFlightNoSafetyTimerRuns) {
  EventLoopOptions o = with_mode(ProgressMode::event);
  o.safety_interval = 1ms;
  EventLoop loop(o);
  loop.start();
  EventfdPoller p;
  Attached a(loop, p);
  ASSERT_TRUE(eventually([&] { return p.arm_calls.load() >= 1; }));
  const long arms = p.arm_calls.load();
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(p.arm_calls.load(), arms);
}

TEST(Poller, KickAfterSubmissionProgressesWithoutAWakeup) {
  EventLoop loop(with_mode(ProgressMode::event));
  loop.start();
  EventfdPoller p;
  Attached a(loop, p);
  ASSERT_TRUE(eventually([&] { return p.arm_calls.load() >= 1; }));
  loop.submit([&] {
    p.add_work(7, /*signal=*/false);  // a submission on the loop thread after arming
    a.handle.kick();
  });
  ASSERT_TRUE(eventually([&] { return p.completed.load() == 7; }, 2s));
}

TEST(Poller, PollModeProgressesContinuouslyAndNeverArms) {
  EventLoop loop(with_mode(ProgressMode::poll));
  loop.start();
  EventfdPoller p;
  Attached a(loop, p);
  ASSERT_TRUE(eventually([&] { return p.progress_calls.load() > 1000; }));
  p.add_work(3, /*signal=*/false);
  ASSERT_TRUE(eventually([&] { return p.completed.load() == 3; }));
  EXPECT_EQ(p.arm_calls.load(), 0);
}

// True once `counter` stays the same for 50 ms: the loop has stopped spinning on the poller.
bool goes_quiet(const std::atomic<long>& counter) {
  return eventually([&] {
    const long before = counter.load();
    std::this_thread::sleep_for(50ms);
    return counter.load() == before;
  });
}

TEST(Poller, AdaptiveIsTheDefaultMode) { EXPECT_EQ(EventLoopOptions{}.mode, ProgressMode::adaptive); }

TEST(Poller, AdaptiveGoesQuietWhenIdleAndWakesOnTheFd) {
  EventLoop loop(with_mode(ProgressMode::adaptive));
  loop.start();
  EventfdPoller p;
  Attached a(loop, p);
  ASSERT_TRUE(goes_quiet(p.progress_calls)) << "adaptive mode must not spin while nothing arrives";
  for (int round = 1; round <= 20; ++round) {
    p.add_work(1, /*signal=*/true);
    ASSERT_TRUE(eventually([&] { return p.completed.load() == round; }));
  }
  ASSERT_TRUE(goes_quiet(p.progress_calls)) << "after the last arrival the spin ends and the loop sleeps";
  const long arms = p.arm_calls.load();
  p.add_work(1, /*signal=*/true);
  ASSERT_TRUE(eventually([&] { return p.completed.load() == 21; }));
  ASSERT_TRUE(eventually([&] { return p.arm_calls.load() > arms; })) << "armed again before sleeping";
}

TEST(Poller, AdaptiveSpinsAfterASubmissionWhenAnswersCameThatFast) {
  EventLoopOptions o = with_mode(ProgressMode::adaptive);
  o.adaptive_spin_max = std::chrono::seconds(10);  // room for gaps far above the machine's jitter
  EventLoop loop(o);
  loop.start();
  EventfdPoller p;
  Attached a(loop, p);
  // Teach it: each submission is answered ~20 ms later (signalled, so a sleeping loop wakes too).
  for (int round = 1; round <= 16; ++round) {
    loop.submit([&] { a.handle.kick(); });
    std::this_thread::sleep_for(20ms);
    p.add_work(1, /*signal=*/true);
    ASSERT_TRUE(eventually([&] { return p.completed.load() == round; }));
  }
  // Now an answer 5 ms after a submission that never signals the fd: only a spinning loop finds it.
  loop.submit([&] { a.handle.kick(); });
  std::this_thread::sleep_for(5ms);
  p.add_work(1, /*signal=*/false);
  EXPECT_TRUE(eventually([&] { return p.completed.load() == 17; }));
}

TEST(Poller, DetachReleasesTheFdAndStopsProgress) {
  EventLoop loop(with_mode(ProgressMode::event));
  loop.start();
  EventfdPoller p;
  {
    Attached a(loop, p);
    ASSERT_TRUE(eventually([&] { return p.arm_calls.load() >= 1; }));
  }
  EXPECT_NE(::fcntl(p.fd(), F_GETFD), -1) << "the loop must not close an fd it does not own";
  const long calls = p.progress_calls.load();
  p.add_work(1, /*signal=*/true);
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(p.progress_calls.load(), calls);
}

// A completion callback run by progress() may detach its own poller (a transport removed by the
// peer it reports lost): the cycle must not call into that poller again.
TEST(Poller, ProgressThatDetachesItsPollerEndsTheCycle) {
  struct Detaching final : Poller {
    bool progress() override {
      ++calls;
      if (detached) ++calls_after;
      handle.detach();
      detached = true;
      return true;  // it did work: an unchecked cycle would progress again at once
    }
    ArmResult try_arm() override {
      if (detached) ++calls_after;
      return ArmResult::armed;
    }
    int fd() const override { return efd.fd(); }
    bool has_pending() const override { return false; }
    test::EventfdPoller efd;
    PollerHandle handle;
    int calls = 0, calls_after = 0;
    bool detached = false;
  };
  EventLoop loop(with_mode(ProgressMode::event));
  Detaching p;
  loop.call([&] { p.handle = loop.attach(p); });
  loop.run_until([&] { return p.detached; }, std::chrono::steady_clock::now() + 5s);
  loop.poll();
  EXPECT_EQ(p.calls, 1);
  EXPECT_EQ(p.calls_after, 0) << "called into a poller after it was detached";
}

}  // namespace
}  // namespace hmc::runtime
