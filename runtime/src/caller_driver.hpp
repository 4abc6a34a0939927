#pragma once
// Drives a caller-driven loop on a thread that waits for something (a blocking call): it holds the
// seat, runs handlers until its condition holds, and sleeps in the reactor in between.
#include <chrono>
#include <functional>

#include "driver_seat.hpp"
#include "hmc/runtime/asio.hpp"
#include "loop_wakeup.hpp"

namespace hmc::runtime::detail {

class CallerDriver {
 public:
  using clock = std::chrono::steady_clock;

  CallerDriver(asio::io_context& io, DriverSeat& seat, LoopWakeup& wakeup)
      : io_(io), seat_(seat), wakeup_(wakeup), deadline_timer_(io) {}

  // Drives until done() or the deadline, or follows while another thread drives; returns done().
  bool run_until(const std::function<bool()>& done, clock::time_point deadline);

 private:
  void block_until(clock::time_point deadline);
  void disarm_deadline() noexcept;

  asio::io_context& io_;
  DriverSeat& seat_;
  LoopWakeup& wakeup_;
  asio::steady_timer deadline_timer_;                            // the holder's sleep limit
  clock::time_point armed_deadline_ = clock::time_point::max();  // what deadline_timer_ waits for
};

}  // namespace hmc::runtime::detail
