#include "caller_driver.hpp"

#include "hmc/runtime/log.hpp"

namespace hmc::runtime::detail {

namespace {
// run_until reads the clock after this many handlers in a row.
constexpr unsigned kClockEvery = 32;
}  // namespace

bool CallerDriver::run_until(const std::function<bool()>& done, clock::time_point deadline) {
  if (!seat_.lead(done, deadline)) return done();
  try {
    // Ready handlers run without a clock read (one costs 0.1-0.2 us in a VM); the clock is read
    // before blocking, and every kClockEvery handlers (a spinning poller keeps one ready).
    for (unsigned turn = 1; !done() && !io_.stopped(); ++turn) {
      const bool ran = io_.poll_one() != 0;
      if (ran) seat_.wake_done_waiters();
      if (ran && turn % kClockEvery != 0) continue;
      if (clock::now() >= deadline) break;
      if (!ran) {
        block_until(deadline);
        seat_.wake_done_waiters();
      }
    }
  } catch (...) {
    disarm_deadline();
    seat_.leave();  // a handler's exception reaches this caller; the loop stays usable for the next
    wakeup_.signal();
    throw;
  }
  disarm_deadline();
  seat_.leave();
  // Handlers this driver left queued (or a poll() it turned away) belong to an outside selector
  // now: make its wakeup fd readable (no-op without one).
  wakeup_.signal();
  return done();
}

// Sleeps in the reactor until a handler ran or the deadline passed. Not run_one_until: on io_uring
// that tags its kernel timeout with a stack address, and the timeout's late CQE, reaped by the next
// thread to drive, is then run as an operation (a segfault with several drivers). A steady_timer's
// kernel timeout is tagged with the reactor's own member instead.
void CallerDriver::block_until(clock::time_point deadline) {
  if (deadline != clock::time_point::max() && armed_deadline_ != deadline) {
    deadline_timer_.expires_at(deadline);
    deadline_timer_.async_wait([](const error_code&) {});
    armed_deadline_ = deadline;
  }
  io_.run_one();
}

// Cancels the holder's deadline timer (its no-op handler runs on a later pass).
void CallerDriver::disarm_deadline() noexcept {
  if (armed_deadline_ == clock::time_point::max()) return;
  armed_deadline_ = clock::time_point::max();
  try {
    deadline_timer_.cancel();
  } catch (const std::exception& e) {  // a timer's cancel has nothing to fail on; say so if it does
    log().error("event loop: cancelling the deadline timer failed: {}", e.what());
  }
}

}  // namespace hmc::runtime::detail
