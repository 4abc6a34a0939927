#pragma once
// Saturating time arithmetic: a timeout of days, years or "forever" never overflows a clock.
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>

namespace hmc::runtime {

using steady_clock = std::chrono::steady_clock;

// now + d, clamped to time_point::max() (steady_clock counts nanoseconds: ~292 years from boot).
template <class Rep, class Period>
steady_clock::time_point deadline_after(std::chrono::duration<Rep, Period> d,
                                        steady_clock::time_point now = steady_clock::now()) noexcept {
  using ns = steady_clock::duration;
  if (d <= std::chrono::duration<Rep, Period>::zero()) return now;
  const auto room = steady_clock::time_point::max() - now;  // positive: now is after the epoch
  // Compare in the coarser of the two units so the conversion itself cannot overflow.
  if (std::chrono::duration_cast<std::chrono::duration<double>>(d) >=
      std::chrono::duration_cast<std::chrono::duration<double>>(room))
    return steady_clock::time_point::max();
  return now + std::chrono::duration_cast<ns>(d);
}

// Seconds from a user (Python float, CLI) as milliseconds: nullopt for NaN or negative values;
// +inf and values past the representable range saturate to milliseconds::max().
inline std::optional<std::chrono::milliseconds> seconds_to_ms(double seconds) noexcept {
  if (std::isnan(seconds) || seconds < 0) return std::nullopt;
  const double ms = std::ceil(seconds * 1000.0);  // round up: a 0.0001 s timeout is not "no wait"
  if (ms >= static_cast<double>(std::numeric_limits<std::chrono::milliseconds::rep>::max() / 2))
    return std::chrono::milliseconds::max();
  return std::chrono::milliseconds(static_cast<std::chrono::milliseconds::rep>(ms));
}

}  // namespace hmc::runtime
