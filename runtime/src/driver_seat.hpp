#pragma once
// Which thread runs a loop's handlers: one at a time holds the seat; callers that want it wait as
// followers, and the keeper takes it only when nobody else wants it.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "hmc/runtime/asio.hpp"
#include "loop_wakeup.hpp"

namespace hmc::runtime {
class EventLoop;
}

namespace hmc::runtime::detail {

class DriverSeat {
 public:
  using clock = std::chrono::steady_clock;

  // Both defined where EventLoop is complete (a deferred teardown holds one).
  DriverSeat(asio::io_context& io, LoopWakeup& wakeup);
  ~DriverSeat();
  DriverSeat(const DriverSeat&) = delete;
  DriverSeat& operator=(const DriverSeat&) = delete;

  bool on_driver_thread() const noexcept { return driver_.load() == std::this_thread::get_id(); }
  // Marks the thread running handlers outside the seat protocol (the destructor's drain).
  void set_driver(std::thread::id id) noexcept { driver_.store(id); }

  // Takes the seat; false (without it) once done() holds, the deadline passed or the loop stopped.
  // While another thread holds it, sleeps until one of those or until the holder leaves.
  bool lead(const std::function<bool()>& done, clock::time_point deadline);
  // Takes the seat if it is free; never waits. Refused, it empties the wakeup fd with the seat's
  // lock held when `consume_if_refused`: the holder's leave signals it again afterwards.
  bool try_take(bool consume_if_refused = false);
  // Wakes the followers whose condition now holds (after each handler the holder runs).
  void wake_done_waiters();
  // Gives the seat up: a follower takes over; a teardown handed over by defer_teardown runs now.
  void leave() noexcept;
  bool has_waiters() const noexcept { return waiter_count_.load() != 0; }

  // The keeper's turn: nullopt once the loop stopped, zero when the keeper now holds the seat, else
  // how long to nap. It drives only when nobody held the seat for `yield` or work was handed to it.
  std::optional<clock::duration> keeper_turn(clock::duration yield);

  // destroy() from a handler: `loop` dies after `first`, both when the holder leaves.
  void defer_teardown(std::unique_ptr<EventLoop> loop, std::shared_ptr<void> first);

 private:
  // A thread that waits for the seat: woken when its condition holds or the holder leaves.
  struct Waiter {
    explicit Waiter(const std::function<bool()>& d) : done(&d) {}
    const std::function<bool()>* done;
    std::condition_variable cv;
    bool woken = false;
  };

  asio::io_context& io_;
  LoopWakeup& wakeup_;
  std::atomic<std::thread::id> driver_{};  // the thread running handlers now
  std::mutex mutex_;                       // everything below
  bool leading_ = false;
  bool keeper_leading_ = false;           // the holder is the keeper: followers wake it
  bool keeper_awaits_leave_ = false;      // the keeper waits for the holding caller to leave
  std::uint64_t leaves_ = 0;              // how many times a holder left
  std::uint64_t keeper_seen_leaves_ = 0;  // leaves_ when the keeper last looked
  std::vector<Waiter*> waiters_;
  std::atomic<std::size_t> waiter_count_{0};
  std::unique_ptr<EventLoop> deferred_loop_;
  std::shared_ptr<void> deferred_first_;
};

}  // namespace hmc::runtime::detail
