#pragma once
// The keeper of a caller-driven loop (ProgressThread::shared): a thread that drives the loop while
// no caller does, and steps aside as soon as one wants to.
#include <chrono>

#include "driver_seat.hpp"
#include "hmc/runtime/asio.hpp"
#include "loop_wakeup.hpp"

namespace hmc::runtime::detail {

class Keeper {
 public:
  Keeper(asio::io_context& io, DriverSeat& seat, LoopWakeup& wakeup, std::chrono::microseconds yield)
      : io_(io), seat_(seat), wakeup_(wakeup), yield_(yield) {}

  // The keeper thread's body, until the loop stops: once callers came, it waits until none has
  // driven for `yield` (they keep the loop without a hand-over per call), then drives again; at
  // once when nudged (work for a thread that waits without driving).
  void run() {
    for (;;) {
      const auto turn = seat_.keeper_turn(yield_);
      if (!turn) return;
      if (*turn != DriverSeat::clock::duration::zero()) {
        wakeup_.nap(*turn);
        continue;
      }
      wakeup_.nudged.store(false);  // what was handed over before now runs in this turn
      while (!seat_.has_waiters() && io_.run_one() != 0) seat_.wake_done_waiters();
      seat_.leave();
    }
  }

 private:
  asio::io_context& io_;
  DriverSeat& seat_;
  LoopWakeup& wakeup_;
  const std::chrono::microseconds yield_;
};

}  // namespace hmc::runtime::detail
