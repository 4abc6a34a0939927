#pragma once
// Drives one Poller on the loop with the arm contract for the loop's progress mode.
#include <chrono>
#include <memory>

#include "hmc/runtime/asio.hpp"
#include "hmc/runtime/poller.hpp"
#include "hmc/runtime/progress_mode.hpp"

namespace hmc::runtime {
struct EventLoopOptions;
}

namespace hmc::runtime::detail {

class PollerDriver : public std::enable_shared_from_this<PollerDriver> {
 public:
  PollerDriver(asio::io_context& io, Poller& poller, const EventLoopOptions& options);
  ~PollerDriver();

  void start();
  void kick();
  void stop();

 private:
  using clock = std::chrono::steady_clock;

  void schedule();
  void cycle();
  void wait_fd();
  void arm_safety_timer(std::chrono::microseconds after);

  asio::io_context& io_;
  Poller& poller_;
  ProgressMode mode_;
  std::chrono::microseconds hybrid_spin_;
  std::chrono::milliseconds safety_interval_;
  asio::posix::stream_descriptor fd_;
  asio::steady_timer safety_timer_;
  clock::time_point last_activity_{};
  int idle_busy_arms_ = 0;  // arms in a row that answered busy while progress found nothing
  bool scheduled_ = false;
  bool fd_waiting_ = false;
  bool timer_armed_ = false;
  bool stopped_ = false;
};

}  // namespace hmc::runtime::detail
