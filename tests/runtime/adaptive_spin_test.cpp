// AdaptiveSpin: the adaptive mode's spin window, fed with synthetic times (no clock, no timing).
#include <gtest/gtest.h>

#include "adaptive_spin.hpp"

namespace hmc::runtime::detail {
namespace {

using namespace std::chrono_literals;
using clock = AdaptiveSpin::clock;

class AdaptiveSpinTest : public ::testing::Test {
 protected:
  // A round trip: we submit, the answer arrives `gap` later (after idle progress calls).
  void round_trips(int n, clock::duration gap) {
    for (int i = 0; i < n; ++i) {
      spin.submission(now);
      now += gap;
      spin.arrival(now, /*after_idle=*/true);
      now += 1us;
    }
  }
  AdaptiveSpin spin{100us};
  clock::time_point now = clock::time_point{} + 1h;
};

TEST_F(AdaptiveSpinTest, FreshSpinIsShortButNotZero) {
  spin.submission(now);
  EXPECT_GT(spin.window(), 0us);
  EXPECT_LE(spin.window(), 10us);
}

TEST_F(AdaptiveSpinTest, FastRoundTripsAreCaughtBySpinning) {
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

TEST_F(AdaptiveSpinTest, GapsLongerThanTheMaximumStopTheSpin) {
  round_trips(20, 10us);
  round_trips(10, 5ms);
  spin.submission(now);
  EXPECT_EQ(spin.window(), 0us) << "spinning cannot catch a 5 ms gap: sleep at once";
}

TEST_F(AdaptiveSpinTest, ComesBackWithinAFewFastRoundTripsAfterIdling) {
  round_trips(10, 1s);
  spin.submission(now);
  EXPECT_EQ(spin.window(), 0us);
  round_trips(8, 10us);
  spin.submission(now);
  EXPECT_GE(spin.window(), 15us);
}

TEST_F(AdaptiveSpinTest, KindsAreKeptApart) {
  // A server: a message arrives, it answers 1 us later, the next message comes 2 ms after that.
  for (int i = 0; i < 20; ++i) {
    spin.arrival(now, true);
    now += 1us;
    spin.submission(now);
    now += 2ms;
  }
  spin.arrival(now, true);
  EXPECT_EQ(spin.last_activity(), now);
  EXPECT_GE(spin.window(), 5us) << "after an arrival the answer comes quickly: spin";
  now += 1us;
  spin.submission(now);
  EXPECT_EQ(spin.window(), 0us) << "after our answer the next message is far: sleep";
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
