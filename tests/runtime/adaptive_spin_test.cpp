// AdaptiveSpin: the adaptive mode's spin window, fed with synthetic times (no clock, no timing).
#include <gtest/gtest.h>

#include <cstdio>

#include "adaptive_spin.hpp"

namespace hmc::runtime::detail {
namespace {

using namespace std::chrono_literals;
using clock = AdaptiveSpin::clock;

class AdaptiveSpinTest : public ::testing::Test {
 protected:
  // We submit; the answer arrives `gap` later: caught by the spin when the gap is inside the
  // window, else after the loop armed and slept.
  void round_trips(int n, clock::duration gap) {
    for (int i = 0; i < n; ++i) {
      spin.submission(now);
      if (gap >= spin.window()) {
        wasted += spin.window();  // spun for nothing, then slept
        spin.sleeping(now + spin.window(), 0);
      }
      now += gap;
      spin.arrival(now, /*after_idle=*/true);
      now += 1us;
    }
  }
  AdaptiveSpin spin{100us};
  clock::time_point now = clock::time_point{} + 1h;
  clock::duration wasted{};
};

TEST_F(AdaptiveSpinTest, StartsWithOneFullLengthSpin) {
  spin.submission(now);
  EXPECT_EQ(spin.window(), 100us);
}

TEST_F(AdaptiveSpinTest, FastRoundTripsKeepTheSpinNearTheGap) {
  round_trips(20, 10us);
  spin.submission(now);
  EXPECT_GE(spin.window(), 15us) << "the next answer (10 us away) must fall inside the spin";
  EXPECT_LE(spin.window(), 30us) << "but the spin stays near the gap, not the maximum";
}

TEST_F(AdaptiveSpinTest, SpinNeverExceedsTheMaximum) {
  round_trips(20, 90us);
  spin.submission(now);
  EXPECT_EQ(spin.window(), 100us);
}

TEST_F(AdaptiveSpinTest, RepeatedFullLengthMissesStopTheSpin) {
  round_trips(2, 5ms);
  spin.submission(now);
  EXPECT_EQ(spin.window(), 100us) << "one slow answer is not a pattern";
  round_trips(6, 5ms);
  spin.submission(now);
  EXPECT_EQ(spin.window(), 0us) << "spinning cannot catch a 5 ms gap: sleep at once";
}

TEST_F(AdaptiveSpinTest, QuickHitsBetweenSlowAnswersDoNotKeepAFullSpinGoing) {
  // Per operation: a local completion after 2 us (caught), then two answers 5 ms away (missed).
  for (int i = 0; i < 10; ++i) {
    round_trips(1, 2us);
    round_trips(2, 5ms);
  }
  wasted = {};
  for (int i = 0; i < 100; ++i) {
    round_trips(1, 2us);
    round_trips(2, 5ms);
  }
  const auto per_operation = wasted / 100;
  std::printf("spun in vain per operation: %.1f us\n",
              std::chrono::duration<double, std::micro>(per_operation).count());
  EXPECT_LT(per_operation, 25us) << "short spins for the quick completions, none for the far answers";
}

TEST_F(AdaptiveSpinTest, AShortSpinThatMissesLooksFurtherNextTime) {
  round_trips(20, 2us);
  spin.submission(now);
  const auto short_window = spin.window();
  EXPECT_LT(short_window, 20us);
  round_trips(1, 40us);  // missed: the loop slept
  spin.submission(now);
  EXPECT_GT(spin.window(), short_window);
  round_trips(3, 40us);
  spin.submission(now);
  EXPECT_GT(spin.window(), 40us) << "after a few doublings the 40 us answers are caught again";
}

TEST_F(AdaptiveSpinTest, AStoppedSpinComesBackAtTheFirstArrivalASpinWouldHaveCaught) {
  round_trips(8, 1s);
  spin.submission(now);
  ASSERT_EQ(spin.window(), 0us);
  round_trips(1, 30us);  // the loop slept, yet the answer came within the maximum spin
  spin.submission(now);
  EXPECT_GE(spin.window(), 30us);
  round_trips(12, 10us);
  spin.submission(now);
  EXPECT_GT(spin.window(), 10us);
  EXPECT_LE(spin.window(), 30us) << "and eases back down to the gap";
}

TEST_F(AdaptiveSpinTest, AStoppedSpinProbesNowAndThen) {
  round_trips(8, 1s);
  spin.submission(now);
  ASSERT_EQ(spin.window(), 0us);
  int rounds = 0;
  while (spin.window() == 0us && rounds < 100) {
    round_trips(1, 150us);  // beyond any spin: only a probe can tell
    spin.submission(now);
    ++rounds;
  }
  EXPECT_EQ(spin.window(), 100us) << "a full-length probe";
  EXPECT_LE(rounds, 16);
  round_trips(1, 150us);
  spin.submission(now);
  EXPECT_EQ(spin.window(), 0us) << "the probe missed: asleep again at once";
}

TEST_F(AdaptiveSpinTest, KindsAreKeptApart) {
  // A server: a message arrives, it answers 1 us later, the next message comes 2 ms after that.
  for (int i = 0; i < 20; ++i) {
    spin.arrival(now, true);
    now += 1us;
    spin.submission(now);
    if (spin.window() <= 2ms) spin.sleeping(now + spin.window(), 0);
    now += 2ms;
  }
  spin.arrival(now, true);
  EXPECT_EQ(spin.last_activity(), now);
  EXPECT_GT(spin.window(), 0us) << "after an arrival the loop's own answer comes quickly: spin";
  now += 1us;
  spin.submission(now);
  EXPECT_EQ(spin.window(), 0us) << "after our answer the next message is far: sleep";
}

TEST_F(AdaptiveSpinTest, AMixOfShortAndLongGapsIsCoveredUpToTheLongOnes) {
  // A client: its put completes 2 us after submission, the peer's answer comes 20 us after the tag.
  for (int i = 0; i < 30; ++i) {
    round_trips(1, 2us);
    round_trips(1, 20us);
  }
  spin.submission(now);
  EXPECT_GE(spin.window(), 25us) << "after every short completion the spin must still cover the answer";
  EXPECT_LE(spin.window(), 60us);
}

TEST_F(AdaptiveSpinTest, APreemptionPerArrivalStopsTheSpinForAWhile) {
  round_trips(20, 10us);
  long preempted = 3;
  spin.sleeping(now, preempted);  // the first reading has nothing to compare with
  spin.submission(now);
  ASSERT_GT(spin.window(), 0us);
  spin.arrival(now += 10us, true);
  spin.sleeping(now, preempted += 2);  // two preemptions for one arrival: the core is shared
  spin.submission(now += 1us);
  EXPECT_EQ(spin.window(), 0us) << "spinning would keep the peer from the core it needs";
  now += 60ms;
  spin.submission(now);
  EXPECT_GT(spin.window(), 0us) << "50 ms later it tries again";
}

TEST_F(AdaptiveSpinTest, AnOccasionalPreemptionDoesNotStopTheSpin) {
  spin.sleeping(now, 3);
  round_trips(20, 10us);
  spin.sleeping(now, 4);  // one preemption over twenty arrivals
  spin.submission(now += 1us);
  EXPECT_GT(spin.window(), 0us);
}

TEST_F(AdaptiveSpinTest, BurstsDoNotCountAsGaps) {
  round_trips(20, 40us);
  spin.submission(now);
  now += 40us;
  for (int i = 0; i < 50; ++i) {
    spin.arrival(now, i == 0);  // one arrival, then the rest of its burst
    now += 100ns;
  }
  spin.submission(now);
  EXPECT_GE(spin.window(), 70us) << "the burst's back-to-back completions must not shrink the spin";
}

}  // namespace
}  // namespace hmc::runtime::detail
