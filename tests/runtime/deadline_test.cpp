// Saturating deadlines and user-given seconds: no overflow for huge, infinite or tiny timeouts.
#include <gtest/gtest.h>

#include <limits>

#include "hmc/runtime/deadline.hpp"

namespace hmc::runtime {
namespace {

using namespace std::chrono_literals;

TEST(Deadline, OrdinaryTimeoutsAddUp) {
  const auto now = steady_clock::now();
  EXPECT_EQ(deadline_after(250ms, now), now + 250ms);
  EXPECT_EQ(deadline_after(0ms, now), now);
  EXPECT_EQ(deadline_after(-5s, now), now);
}

TEST(Deadline, HugeTimeoutsSaturateInsteadOfWrapping) {
  const auto now = steady_clock::now();
  EXPECT_EQ(deadline_after(std::chrono::milliseconds::max(), now), steady_clock::time_point::max());
  EXPECT_EQ(deadline_after(std::chrono::hours(24 * 200), now), now + std::chrono::hours(24 * 200));  // > 106 days
  EXPECT_EQ(deadline_after(std::chrono::hours(24 * 365 * 1000), now), steady_clock::time_point::max());
  EXPECT_GT(deadline_after(std::chrono::seconds::max(), now), now);
}

TEST(Deadline, SecondsFromUsers) {
  EXPECT_EQ(seconds_to_ms(1.5), 1500ms);
  EXPECT_EQ(seconds_to_ms(0.0), 0ms);
  EXPECT_EQ(seconds_to_ms(0.0001), 1ms);  // rounds up: a tiny timeout still waits
  EXPECT_EQ(seconds_to_ms(std::numeric_limits<double>::infinity()), std::chrono::milliseconds::max());
  EXPECT_EQ(seconds_to_ms(1e300), std::chrono::milliseconds::max());
  EXPECT_EQ(seconds_to_ms(-1.0), std::nullopt);
  EXPECT_EQ(seconds_to_ms(std::numeric_limits<double>::quiet_NaN()), std::nullopt);
}

}  // namespace
}  // namespace hmc::runtime
