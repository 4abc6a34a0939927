#include "poller_driver.hpp"

#include <sys/resource.h>

#include <algorithm>

#include "hmc/runtime/event_loop.hpp"
#include "hmc/runtime/log.hpp"

namespace hmc::runtime::detail {

namespace {
// After this many consecutive busy progress calls the driver yields to other handlers on the loop.
constexpr int kMaxProgressBurst = 64;
// A source that keeps answering busy to arm with nothing to progress (UCX with sends queued for a
// peer that does not consume) is retried after a pause that doubles every 16 tries, never in a
// tight loop. The longest pause keeps a peer stopped for good at ~50 wake-ups a second, and is
// reached only after ~0.4 s of standstill, so a peer that pauses briefly is noticed within a few ms.
constexpr int kMaxIdleBusyArms = 16;
constexpr std::chrono::microseconds kFirstBusyBackoff{50};
constexpr std::chrono::microseconds kLastBusyBackoff{20'000};
constexpr int kBusyBackoffDoublings = 9;  // 50 us * 2^9 passes kLastBusyBackoff
// How often adaptive mode reads its thread's preemption count when it goes to sleep.
constexpr std::chrono::milliseconds kPreemptionProbe{1};
}  // namespace

PollerDriver::PollerDriver(asio::io_context& io, Poller& poller, const EventLoopOptions& options)
    : io_(io),
      poller_(poller),
      mode_(options.mode),
      safety_interval_(options.safety_interval),
      fd_(io),
      safety_timer_(io),
      activity_(options.adaptive_spin_max) {}

PollerDriver::~PollerDriver() {
  // The fd belongs to the poller: hand it back instead of closing it.
  if (fd_.is_open()) fd_.release();
}

void PollerDriver::start() {
  if (mode_ != ProgressMode::poll) fd_.assign(poller_.fd());
  kick();
}

// The submission's time is the next cycle's: one clock read per cycle (a read costs 0.1-0.2 us
// in a VM, as much as the rest of a cycle).
void PollerDriver::kick() {
  kicked_ = true;
  schedule();
}

void PollerDriver::poke() { schedule(); }

void PollerDriver::hold() { holding_ = true; }

bool PollerDriver::release() {
  holding_ = false;
  if (!held_) return false;
  held_ = false;
  schedule();
  return true;
}

void PollerDriver::stop() {
  if (stopped_) return;
  stopped_ = true;
  error_code ignored;
  safety_timer_.cancel();
  // Cancelled, released only by the destructor (after the wait's handler): Asio 1.26's io_uring
  // backend would hand the wait still in the ring to the next descriptor it registers.
  if (fd_.is_open()) fd_.cancel(ignored);
}

void PollerDriver::again() {
  if (holding_) {
    held_ = true;
    return;
  }
  schedule();
}

void PollerDriver::schedule() {
  if (scheduled_ || stopped_) return;
  scheduled_ = true;
  asio::post(io_, [self = shared_from_this()] {
    self->scheduled_ = false;
    self->cycle();
  });
}

long PollerDriver::preemptions() noexcept {
  ::rusage usage{};
  return ::getrusage(RUSAGE_THREAD, &usage) == 0 ? usage.ru_nivcsw : 0;
}

PollerDriver::clock::duration PollerDriver::spin_window() const noexcept {
  switch (mode_) {
    case ProgressMode::adaptive: return activity_.window();
    case ProgressMode::event:
    case ProgressMode::poll: break;
  }
  return clock::duration::zero();
}

void PollerDriver::cycle() {
  if (stopped_) return;
  const clock::time_point now = clock::now();
  if (kicked_) {
    kicked_ = false;
    activity_.submission(now);
  }
  for (int burst = 0; poller_.progress(); ++burst) {
    if (stopped_) return;  // progress() ran callbacks that detached the poller: do not touch it again
    activity_.arrival(now, idle_);
    idle_ = false;
    idle_busy_arms_ = 0;
    if (burst + 1 == kMaxProgressBurst) {
      again();  // still busy: come back after other handlers had their turn
      return;
    }
  }
  if (stopped_) return;
  idle_ = true;
  if (mode_ == ProgressMode::poll) {
    again();
    return;
  }
  const clock::duration window = spin_window();
  if (window > clock::duration::zero() && now - activity_.last_activity() < window) {
    again();  // spinning: the next arrival is expected soon, a wakeup would cost more
    return;
  }
  if (poller_.try_arm() == ArmResult::busy) {
    idle_busy_arms_ = std::min(idle_busy_arms_ + 1, kMaxIdleBusyArms * (kBusyBackoffDoublings + 1));
    if (idle_busy_arms_ < kMaxIdleBusyArms) {
      again();  // events raced with arming: progress again, never sleep on them
      return;
    }
    const int doublings = idle_busy_arms_ / kMaxIdleBusyArms - 1;
    arm_safety_timer(std::min(kLastBusyBackoff, kFirstBusyBackoff * (1 << doublings)));
    return;
  }
  idle_busy_arms_ = 0;
  if (mode_ == ProgressMode::adaptive) {
    // getrusage is a system call: at most one per kPreemptionProbe, not one per sleep.
    if (now - last_probe_ >= kPreemptionProbe) {
      last_probe_ = now;
      activity_.sleeping(now, preemptions());
    } else {
      activity_.sleeping();
    }
  }
  wait_fd();
  if (poller_.has_pending()) arm_safety_timer(safety_interval_);
}

void PollerDriver::wait_fd() {
  if (fd_waiting_) return;
  fd_waiting_ = true;
  fd_.async_wait(asio::posix::descriptor_base::wait_read, [self = shared_from_this()](const error_code& ec) {
    self->fd_waiting_ = false;
    if (ec || self->stopped_) return;
    self->cycle();
  });
}

void PollerDriver::arm_safety_timer(std::chrono::microseconds after) {
  if (timer_armed_) return;
  timer_armed_ = true;
  safety_timer_.expires_after(after);
  safety_timer_.async_wait([self = shared_from_this()](const error_code& ec) {
    self->timer_armed_ = false;
    if (ec || self->stopped_) return;
    log().trace("poller safety timer fired with work in flight");
    self->cycle();
  });
}

}  // namespace hmc::runtime::detail
