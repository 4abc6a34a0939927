#pragma once
// One asio::io_context with io_uring as its reactor, run by one owned thread or by the caller.
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string_view>
#include <thread>

#include "hmc/runtime/asio.hpp"
#include "hmc/runtime/poller_handle.hpp"
#include "hmc/runtime/progress_mode.hpp"

namespace hmc::runtime {

class Poller;

struct EventLoopOptions {
  ProgressMode mode = ProgressMode::event;
  // hybrid mode: how long to keep spinning after the last activity before arming
  std::chrono::microseconds hybrid_spin{50};
  // while work is in flight, progress at least this often even without a wakeup (UCX can miss one)
  std::chrono::milliseconds safety_interval{2};
};

class EventLoop {
 public:
  using executor_type = asio::io_context::executor_type;

  explicit EventLoop(EventLoopOptions options = {});
  ~EventLoop();  // stops the loop and joins the owned thread
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Runs the loop on a new owned thread; returns at once.
  void start();
  // Runs the loop on the calling thread until stop().
  void run();
  // Makes run() return and joins the owned thread; safe from any thread but the loop's own.
  void stop();

  executor_type executor() noexcept { return io_.get_executor(); }
  asio::io_context& context() noexcept { return io_; }
  const EventLoopOptions& options() const noexcept { return options_; }
  bool in_loop_thread() const noexcept;

  // Registers an external progress source; the handle detaches it. Call on the loop thread.
  PollerHandle attach(Poller& poller);

  // Runs f on the loop thread: inline when already there, else posted (cross-thread submission).
  template <class F>
  void submit(F&& f) {
    if (in_loop_thread()) {
      std::forward<F>(f)();
    } else {
      asio::post(io_, std::forward<F>(f));
    }
  }

  // Runs f on the loop thread and returns its result (or rethrows its exception), waiting for it;
  // inline when called on the loop thread or when no thread runs the loop (nothing else can then).
  template <class F>
  auto call(F f) -> decltype(f()) {
    if (in_loop_thread() || !running_.load() || io_.stopped()) return f();
    std::packaged_task<decltype(f())()> task(std::move(f));
    auto result = task.get_future();
    asio::post(io_, [&task] { task(); });
    return result.get();
  }

  // The reactor Asio was built with: "io_uring" or "epoll".
  static std::string_view backend() noexcept;
  // Whether this build carries the Asio 1.26 io_uring cancel fix (docs/design.md).
  static bool uring_cancel_fix() noexcept;

 private:
  EventLoopOptions options_;
  asio::io_context io_{1};
  asio::executor_work_guard<executor_type> work_;
  std::thread thread_;
  std::atomic<std::thread::id> loop_thread_id_{};
  std::atomic<bool> running_{false};  // a thread runs (or is about to run) the loop
};

}  // namespace hmc::runtime
