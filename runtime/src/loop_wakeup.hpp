#pragma once
// How threads outside a caller-driven loop learn that it has work: the wakeup eventfd an outside
// selector waits on, and the bell the keeper naps on.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include "hmc/runtime/asio.hpp"

namespace hmc::runtime::detail {

// Shared between the loop and posters: a poster may still signal it after its post, when a handler
// may already have destroyed the loop.
class LoopWakeup {
 public:
  ~LoopWakeup();
  // Makes the wakeup fd readable; one write until the next consume().
  void signal() noexcept;
  // Reads the eventfd empty; true when it had been signalled.
  bool consume() noexcept;

  // The keeper naps on this bell; a driver's leave (while the keeper waits for it), the stop and
  // nudges ring it. `rung_` stays set until the keeper's next nap: a ring is never missed.
  void ring() noexcept;
  void nap(std::chrono::steady_clock::duration d);
  // Work was handed over by a thread that will wait for it without driving (a std::future): the
  // keeper drives now rather than keeper_yield after the last caller left. One ring until served.
  void nudge() noexcept;

  std::atomic<int> efd{-1};         // set once, by the selector driver
  std::atomic<bool> keeper{false};  // set once, when the keeper starts
  std::atomic<bool> nudged{false};  // work waits for the keeper; cleared when the keeper drives

 private:
  std::atomic<bool> signalled_{false};
  std::mutex bell_mutex_;
  std::condition_variable bell_cv_;
  bool rung_ = false;
};

// Makes `wakeup` the one posts to `io` find (before anyone posts).
void register_wakeup(asio::io_context& io, std::shared_ptr<LoopWakeup> wakeup);
// Counts, per process, the loops with a wakeup fd and with a keeper: while there are none, a post
// costs no service lookup.
void count_wakeup_fds(int delta) noexcept;
void count_keepers(int delta) noexcept;

}  // namespace hmc::runtime::detail
