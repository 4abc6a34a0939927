#pragma once
// One asio::io_context with io_uring as its reactor, run by one owned thread or driven by its callers.
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string_view>
#include <thread>

#include "hmc/runtime/asio.hpp"
#include "hmc/runtime/async_op.hpp"
#include "hmc/runtime/one_shot.hpp"
#include "hmc/runtime/poller_handle.hpp"
#include "hmc/runtime/progress_mode.hpp"

namespace hmc::runtime {

class Poller;

struct EventLoopOptions {
  ProgressMode mode = ProgressMode::adaptive;
  // adaptive mode: the longest spin after activity (the spin follows the recent gaps between arrivals)
  std::chrono::microseconds adaptive_spin_max{100};
  // while work is in flight, progress at least this often even without a wakeup (UCX can miss one)
  std::chrono::milliseconds safety_interval{2};
  // start_keeper(): how long callers must have left the loop alone before the keeper drives again
  std::chrono::microseconds keeper_yield{1000};
  // A thread blocked on an operation of a dedicated loop checks for its completion this long before
  // it sleeps (not in event mode; not while such spins keep missing): a completion microseconds
  // away then costs no futex sleep and wakeup (tens of microseconds in a VM).
  std::chrono::microseconds waiter_spin{50};
};

// Two ways to run it. Dedicated: start() (or run()) gives the loop a thread that runs it until
// stop(). Caller-driven: nobody calls start(); threads drive it while they wait (run_until), or
// explicitly (poll), one at a time: a second waiter sleeps until its condition holds or the driver
// leaves, then takes over. wakeup_fd() lets an outside event loop (asyncio) know when to poll().
// A caller-driven loop may also have a keeper (start_keeper()): a thread that drives it whenever
// no caller has for keeper_yield, and steps aside as soon as a caller waits.
class EventLoop {
 public:
  using executor_type = asio::io_context::executor_type;
  using clock = std::chrono::steady_clock;

  explicit EventLoop(EventLoopOptions options = {});
  // Stops the loop and joins the owned thread. From a handler of this loop (its run() is on the
  // stack) it cannot: the thread is detached and finishes the teardown when that run() returns.
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Destroys `loop` after `first`. Called from a handler of that loop, both are destroyed on the
  // same thread right after the handler's run() returns, so handlers that still reach the loop
  // object (through `first`) find it alive while the loop drains. For owners destroyed by their
  // own completion handlers.
  static void destroy(std::unique_ptr<EventLoop> loop, std::shared_ptr<void> first = {}) noexcept;

  // Runs the loop on a new owned thread; returns at once.
  void start();
  // Runs the loop on the calling thread until stop().
  void run();
  // Caller-driven loops: starts the keeper thread (once); returns at once. stop() joins it.
  void start_keeper();
  // Makes run() return and joins the owned thread (unless called on it).
  void stop();
  bool stopped() const noexcept;
  // start() or run() was called: one thread runs the loop for as long as it lives.
  bool dedicated() const noexcept;

  // Caller-driven loops only (std::logic_error when dedicated, or when called from a handler).
  // Drives the loop on this thread until done() or the deadline, or, while another thread drives
  // it, sleeps until done() holds (checked after each handler), the deadline, or the driver leaves.
  // Returns done(). done() must be safe to call from any thread.
  bool run_until(const std::function<bool()>& done, clock::time_point deadline);
  // Runs the handlers that are ready (at most a batch) and progresses every attached poller once;
  // never blocks. Returns the number of handlers run: 0 also when another thread drives the loop.
  // A poller that would spin (adaptive, poll mode) cycles again in the next poll(), not in
  // this one: the wakeup fd stays readable, so an outside selector runs its own callbacks between
  // two cycles instead of behind a batch of them. With `stop`, returns as soon as stop() holds
  // after a handler; the wakeup fd then stays readable for the rest.
  std::size_t poll(const std::function<bool()>& stop = {});
  // poll() for an outside selector that schedules its next poll() itself (asyncio's call_soon):
  // sets `again` when another poll() is due at once (a poller spins, or the batch limit or `stop`
  // left handlers ready) instead of making the wakeup fd readable, which costs a write and a read.
  std::size_t poll(const std::function<bool()>& stop, bool& again);
  // Readable while the loop has work for poll(): socket I/O and timers (the io_uring ring), the
  // fds of attached pollers once armed (waited on through the ring), handlers posted from other
  // threads, and a poll() that stopped at its batch limit. Owned by the loop. Caller-driven loops.
  int wakeup_fd();

  // Waits for f until the deadline: on the future when dedicated, else with run_until.
  template <class T>
  bool wait(std::future<T>& f, clock::time_point deadline) {
    if (dedicated()) return f.wait_until(deadline) == std::future_status::ready;
    return run_until([&f] { return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }, deadline);
  }
  // The same for a OneShot: when dedicated, a short adaptive spin (waiter_spin) and then asleep.
  bool wait(OneShot& op, clock::time_point deadline);

  executor_type executor() noexcept;
  asio::io_context& context() noexcept;
  const EventLoopOptions& options() const noexcept;
  // True on the thread that runs (or drives) the loop right now.
  bool in_loop_thread() const noexcept;

  // Registers an external progress source; the handle detaches it. Call on the loop thread.
  PollerHandle attach(Poller& poller);

  // Runs f on the loop thread: inline when already there, else posted (cross-thread submission).
  template <class F>
  void submit(F&& f) {
    if (in_loop_thread()) {
      std::forward<F>(f)();
    } else {
      post(std::forward<F>(f));
    }
  }

  // Runs f on the loop thread and returns its result (or rethrows its exception), waiting for it:
  // inline on the loop thread or on a stopped loop, and inline on a caller-driven loop that nobody
  // drives (this thread takes the driver's seat for it); else posted, and a caller-driven loop is
  // driven while waiting.
  template <class F>
  auto call(F f) -> decltype(f()) {
    if (in_loop_thread() || stopped()) return f();
    if (Seat seat(*this); seat) return f();
    std::packaged_task<decltype(f())()> task(std::move(f));
    auto result = task.get_future();
    post([&task] { task(); });
    wait(result, clock::time_point::max());  // false only on a loop stopped meanwhile: its drain runs task
    return result.get();
  }

  // The reactor Asio was built with: "io_uring" or "epoll".
  static std::string_view backend() noexcept;
  // Whether this build carries the Asio 1.26 io_uring cancel fix (docs/progress.md).
  static bool uring_cancel_fix() noexcept;

 private:
  struct State;

  // The driver's seat of a caller-driven loop, taken without waiting when it is free: the holder
  // runs code as if it were a handler. Empty when dedicated, stopped or someone else drives.
  class Seat {
   public:
    explicit Seat(EventLoop& loop);
    ~Seat();
    Seat(const Seat&) = delete;
    Seat& operator=(const Seat&) = delete;
    explicit operator bool() const noexcept { return state_ != nullptr; }

   private:
    std::shared_ptr<State> state_;
  };

  template <class F>
  void post(F&& f) {
    post_to_loop(executor(), std::forward<F>(f));  // touches nothing of this object after posting
  }

  std::shared_ptr<State> state_;  // shared with the owned thread: it may outlive this object
};

}  // namespace hmc::runtime
