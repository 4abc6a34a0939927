#pragma once
// The adaptive progress mode's one decision: how long to keep progressing after an activity before
// arming and sleeping. It spins only while spinning keeps catching the next arrival.
#include <algorithm>
#include <chrono>

namespace hmc::runtime::detail {

// Per kind of activity (after a submission, after an arrival) one spin window:
//  * an arrival caught while spinning (a hit) is an exact gap: the window jumps up to twice it
//    (plus slack) when that is longer, and otherwise eases down towards it by a quarter, so it
//    covers the longer gaps of a mix (a local completion after 2 us, the peer's answer after 20)
//    instead of their mean;
//  * an arrival after the loop slept (a miss) says the gap was longer than the window, and at
//    most what was measured (which includes the wakeup): when that is under the maximum, a spin
//    would surely have caught it and the window covers it from now on; when it is near (under
//    4x the maximum) a short window doubles (look further next time); a full-length spin that
//    missed, or an answer far beyond any spin, counts as a miss, and once most recent spins miss
//    (an average over hits and misses: a quick local completion between two slow answers must
//    not hide them) the window drops to zero: arrivals come slower than any spin we allow;
//  * at zero, every 16th arrival that finds the loop asleep makes the next spin a full-length probe,
//    so the spin comes back when the traffic speeds up again;
//  * a loop thread preempted about once per arrival or more often (counted between sleeps) shares
//    its core with other busy threads: its spinning then delays the very peer it waits for
//    (measured here: one preemption per round trip and 3x event mode's latency), so it does not
//    spin for the next 50 ms. An occasional preemption (the process's own threads) does not count.
// Measuring only hits keeps the wakeup latency out of the estimate: a gap measured across a sleep
// includes it, and averaging those would talk the loop out of spinning exactly when it helps.
class AdaptiveSpin {
 public:
  using clock = std::chrono::steady_clock;

  explicit AdaptiveSpin(std::chrono::microseconds max) noexcept : max_(max) {
    for (Kind& k : kinds_) k.window = max_;  // start optimistic: one bounded spin finds out
  }

  // The loop submitted work (a put, a message): its completion is usually the next arrival.
  void submission(clock::time_point now) noexcept { note(now, kSubmission); }

  // A progress call found work; `after_idle`: the call before it found none (a new arrival, not
  // the rest of a burst).
  void arrival(clock::time_point now, bool after_idle) noexcept {
    if (after_idle) {
      ++arrivals_;
      Kind& k = kinds_[last_kind_];
      if (slept_) {
        missed(k, now - last_);
      } else {
        hit(k, now - last_);
      }
    }
    note(now, kArrival);
  }

  // The loop armed and is about to sleep: the spin after the last activity found nothing.
  // `preempted`: how often the loop thread has been descheduled while runnable (ru_nivcsw).
  void sleeping(clock::time_point now, long preempted) noexcept {
    sleeping();
    const long arrivals = arrivals_ - arrivals_at_sleep_;
    if (preempted_ >= 0 && 4 * (preempted - preempted_) > arrivals) contended_until_ = now + kContendedPause;
    preempted_ = preempted;
    arrivals_at_sleep_ = arrivals_;
  }

  // The same without reading the preemption count (a system call): the next reading covers the
  // arrivals and preemptions since the last one.
  void sleeping() noexcept { slept_ = true; }

  // How long to spin after the last activity.
  clock::duration window() const noexcept {
    return last_ < contended_until_ ? clock::duration::zero() : kinds_[last_kind_].window;
  }

  clock::time_point last_activity() const noexcept { return last_; }

 private:
  static constexpr int kSubmission = 0, kArrival = 1;
  static constexpr std::chrono::microseconds kSlack{5};  // jitter around small gaps
  static constexpr int kMissesPerProbe = 16;
  static constexpr std::chrono::milliseconds kContendedPause{50};
  // The share of recent spins that ran their full length without a hit, in 1/1024ths.
  static constexpr int kOne = 1024, kStopAbove = kOne / 2;

  struct Kind {
    clock::duration window{};
    int full_miss_share = 0;
    int misses_since_probe = 0;
  };

  void hit(Kind& k, clock::duration gap) noexcept {
    const clock::duration target = std::min<clock::duration>(2 * gap + kSlack, max_);
    k.window = target >= k.window ? target : k.window - (k.window - target) / 4;
    k.full_miss_share -= k.full_miss_share / 8;
  }

  void missed(Kind& k, clock::duration at_most) noexcept {
    if (at_most < max_) {
      // Two peers that both sleep answer each other only after a wakeup: this is what lets a
      // stopped spin see that spinning would now pay, and start again on both sides.
      k.window = std::max(k.window, std::min<clock::duration>(at_most + kSlack, max_));
    } else if (k.window == clock::duration::zero()) {
      if (++k.misses_since_probe >= kMissesPerProbe) {
        k.misses_since_probe = 0;
        k.window = max_;                     // probe once...
        k.full_miss_share = kStopAbove - 1;  // ...a miss stops it again, a hit keeps it
      }
    } else if (k.window < max_ && at_most < 4 * max_) {
      k.window = std::min<clock::duration>(2 * k.window + kSlack, max_);  // near: look further
    } else {
      k.full_miss_share += (kOne - k.full_miss_share) / 8;
      if (k.full_miss_share > kStopAbove) {
        k.window = clock::duration::zero();
        k.misses_since_probe = 0;
      }
    }
  }

  void note(clock::time_point now, int kind) noexcept {
    last_ = now;
    last_kind_ = kind;
    slept_ = false;
  }

  std::chrono::microseconds max_;
  Kind kinds_[2];
  clock::time_point last_{};
  int last_kind_ = kSubmission;
  bool slept_ = false;
  long preempted_ = -1;
  long arrivals_ = 0, arrivals_at_sleep_ = 0;
  clock::time_point contended_until_{};
};

}  // namespace hmc::runtime::detail
