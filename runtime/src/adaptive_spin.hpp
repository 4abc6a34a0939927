#pragma once
// The adaptive progress mode's one decision: how long to keep progressing after an activity
// before arming and sleeping. It spins only while the next arrival usually comes within reach.
#include <algorithm>
#include <chrono>

namespace hmc::runtime::detail {

class AdaptiveSpin {
 public:
  using clock = std::chrono::steady_clock;

  explicit AdaptiveSpin(std::chrono::microseconds max) noexcept : max_(max) {}

  // The loop submitted work (a put, a message): its completion is the next arrival.
  void submission(clock::time_point now) noexcept { note(now, false); }
  // A progress call found work; `after_idle`: the call before it found none (a new arrival, not
  // the rest of a burst), so the gap since the last activity says how fast arrivals come.
  void arrival(clock::time_point now, bool after_idle) noexcept {
    if (after_idle) {
      // A long idle gap counts as 4x the longest spin: enough to stop spinning, quick to come back.
      const clock::duration gap = std::min<clock::duration>(now - last_, 4 * max_);
      clock::duration& average = average_[last_was_arrival_ ? 1 : 0];
      average += (gap - average) / 4;
    }
    note(now, true);
  }

  // How long to spin after the last activity: about twice the average gap that followed an
  // activity of its kind, at most `max`; zero when that gap is usually longer than `max`.
  clock::duration window() const noexcept {
    const clock::duration average = average_[last_was_arrival_ ? 1 : 0];
    if (average > max_) return clock::duration::zero();
    return std::min<clock::duration>(2 * average + kSlack, max_);
  }

  clock::time_point last_activity() const noexcept { return last_; }

 private:
  static constexpr std::chrono::microseconds kSlack{5};  // jitter around small gaps

  void note(clock::time_point now, bool arrival) noexcept {
    last_ = now;
    last_was_arrival_ = arrival;
  }

  std::chrono::microseconds max_;
  clock::time_point last_{};
  // average gap from an activity to the next arrival: after a submission [0], after an arrival [1]
  clock::duration average_[2]{};
  bool last_was_arrival_ = false;
};

}  // namespace hmc::runtime::detail
