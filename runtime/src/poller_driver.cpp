#include "poller_driver.hpp"

#include <algorithm>

#include "hmc/runtime/event_loop.hpp"
#include "hmc/runtime/log.hpp"

namespace hmc::runtime::detail {

namespace {
// After this many consecutive busy progress calls the driver yields to other handlers on the loop.
constexpr int kMaxProgressBurst = 64;
// A source that keeps answering busy to arm with nothing to progress (UCX with sends queued for a
// peer that does not consume) is retried after a growing pause, never in a tight loop.
constexpr int kMaxIdleBusyArms = 16;
constexpr std::chrono::microseconds kFirstBusyBackoff{50};
}  // namespace

PollerDriver::PollerDriver(asio::io_context& io, Poller& poller, const EventLoopOptions& options)
    : io_(io),
      poller_(poller),
      mode_(options.mode),
      hybrid_spin_(options.hybrid_spin),
      safety_interval_(options.safety_interval),
      fd_(io),
      safety_timer_(io) {}

PollerDriver::~PollerDriver() {
  // The fd belongs to the poller: hand it back instead of closing it.
  if (fd_.is_open()) fd_.release();
}

void PollerDriver::start() {
  if (mode_ != ProgressMode::poll) fd_.assign(poller_.fd());
  last_activity_ = clock::now();
  schedule();
}

void PollerDriver::kick() {
  last_activity_ = clock::now();
  schedule();
}

void PollerDriver::stop() {
  if (stopped_) return;
  stopped_ = true;
  error_code ignored;
  safety_timer_.cancel();
  if (fd_.is_open()) {
    fd_.cancel(ignored);
    fd_.release();
  }
}

void PollerDriver::schedule() {
  if (scheduled_ || stopped_) return;
  scheduled_ = true;
  asio::post(io_, [self = shared_from_this()] {
    self->scheduled_ = false;
    self->cycle();
  });
}

void PollerDriver::cycle() {
  if (stopped_) return;
  for (int burst = 0; poller_.progress(); ++burst) {
    last_activity_ = clock::now();
    idle_busy_arms_ = 0;
    if (burst + 1 == kMaxProgressBurst) {
      schedule();  // still busy: come back after other handlers had their turn
      return;
    }
  }
  if (mode_ == ProgressMode::poll) {
    schedule();
    return;
  }
  if (mode_ == ProgressMode::hybrid && clock::now() - last_activity_ < hybrid_spin_) {
    schedule();
    return;
  }
  if (poller_.try_arm() == ArmResult::busy) {
    if (++idle_busy_arms_ < kMaxIdleBusyArms) {
      schedule();  // events raced with arming: progress again, never sleep on them
      return;
    }
    const auto pause = std::min<std::chrono::microseconds>(
        safety_interval_, kFirstBusyBackoff * (1 << std::min(idle_busy_arms_ / kMaxIdleBusyArms - 1, 6)));
    arm_safety_timer(pause);
    return;
  }
  idle_busy_arms_ = 0;
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
