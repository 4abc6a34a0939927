// Poller driving: the arm contract in each progress mode, with a real eventfd as the wakeup fd.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "hmc/runtime/event_loop.hpp"
#include "hmc/runtime/poller.hpp"

namespace hmc::runtime {
namespace {

using namespace std::chrono_literals;

// A progress source backed by an eventfd: producers add work and (normally) signal the fd, like a
// UCX worker whose efd fires when completions arrive after ucp_worker_arm.
class EventfdPoller final : public Poller {
 public:
  EventfdPoller() : efd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~EventfdPoller() override { ::close(efd_); }

  bool progress() override {
    ++progress_calls;
    int w = work.load();
    while (w > 0 && !work.compare_exchange_weak(w, w - 1)) {
    }
    if (w <= 0) return false;
    ++completed;
    return true;
  }
  ArmResult try_arm() override {
    ++arm_calls;
    if (busy_arms > 0) {
      --busy_arms;
      return ArmResult::busy;
    }
    std::uint64_t drained = 0;
    while (::read(efd_, &drained, sizeof drained) > 0) {
    }
    return work.load() > 0 ? ArmResult::busy : ArmResult::armed;
  }
  int fd() const override { return efd_; }
  bool has_pending() const override { return pending.load(); }

  void add_work(int n, bool signal) {
    work += n;
    if (signal) {
      std::uint64_t one = 1;
      EXPECT_EQ(::write(efd_, &one, sizeof one), static_cast<ssize_t>(sizeof one));
    }
  }

  std::atomic<int> work{0};
  std::atomic<int> completed{0};
  std::atomic<long> progress_calls{0};
  std::atomic<long> arm_calls{0};
  std::atomic<int> busy_arms{0};
  std::atomic<bool> pending{false};

 private:
  int efd_;
};

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

TEST(Poller, HybridSpinsAfterActivityThenArms) {
  EventLoopOptions o = with_mode(ProgressMode::hybrid);
  o.hybrid_spin = 20ms;
  EventLoop loop(o);
  loop.start();
  EventfdPoller p;
  Attached a(loop, p);
  // Spins for ~20 ms after attaching (counts as activity), then arms and goes quiet.
  ASSERT_TRUE(eventually([&] { return p.arm_calls.load() >= 1; }));
  EXPECT_GT(p.progress_calls.load(), 10);
  const long after_arm = p.progress_calls.load();
  std::this_thread::sleep_for(60ms);
  EXPECT_EQ(p.progress_calls.load(), after_arm);
  p.add_work(2, /*signal=*/true);
  ASSERT_TRUE(eventually([&] { return p.completed.load() == 2; }));
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

}  // namespace
}  // namespace hmc::runtime
