#pragma once
// Drives one Poller on the loop with the arm contract for the loop's progress mode.
#include <chrono>
#include <memory>

#include "adaptive_spin.hpp"
#include "hmc/runtime/asio.hpp"
#include "hmc/runtime/poller.hpp"
#include "hmc/runtime/progress_mode.hpp"

namespace hmc::runtime {
struct EventLoopOptions;
}

namespace hmc::runtime::detail {

class PollerDriver : public std::enable_shared_from_this<PollerDriver> {
 public:
  using clock = std::chrono::steady_clock;

  PollerDriver(asio::io_context& io, Poller& poller, const EventLoopOptions& options);
  ~PollerDriver();

  void start();
  // A submission: activity (adaptive mode spins after it) and a cycle before the loop sleeps.
  void kick();
  // One more cycle (progress, then arm when idle) without counting as activity.
  void poke();
  // EventLoop::poll() holds the cycle's own re-post (a spin, poll mode, a busy burst) while it runs
  // and releases it when it returns: an outside selector then runs its callbacks between two cycles
  // instead of waiting behind a batch of them. release() posts a held cycle; true when there was one.
  void hold();
  bool release();
  void stop();

 private:
  void schedule();
  void again();  // the next cycle right away: posted, or held for release()
  void cycle();
  clock::duration spin_window() const noexcept;
  static long preemptions() noexcept;  // this thread's involuntary context switches
  void wait_fd();
  void arm_safety_timer(std::chrono::microseconds after);

  asio::io_context& io_;
  Poller& poller_;
  ProgressMode mode_;
  std::chrono::milliseconds safety_interval_;
  asio::posix::stream_descriptor fd_;
  asio::steady_timer safety_timer_;
  AdaptiveSpin activity_;   // the last activity, and (adaptive mode) how long to spin after it
  bool idle_ = false;       // the last progress() found nothing: the next work it finds is an arrival
  int idle_busy_arms_ = 0;  // arms in a row that answered busy while progress found nothing
  bool scheduled_ = false;
  bool fd_waiting_ = false;
  bool timer_armed_ = false;
  bool stopped_ = false;
  bool kicked_ = false;             // a submission since the last cycle
  bool holding_ = false;            // inside EventLoop::poll(): again() is held
  bool held_ = false;               // again() was called while holding
  clock::time_point last_probe_{};  // the last preemption count read (adaptive mode)
};

}  // namespace hmc::runtime::detail
