#pragma once
// One way to expose an operation to every completion style: Asio's async_initiate with the token
// last (use_awaitable, use_future, a callback, deferred), started on the loop thread and completed
// through the handler's own executor after a post, never inside the code that found the result.
#include <chrono>
#include <memory>
#include <type_traits>
#include <utility>

#include "hmc/runtime/asio.hpp"

namespace hmc::runtime {

using loop_executor = asio::io_context::executor_type;

// No deadline: for waits whose caller handles time itself.
inline constexpr std::chrono::nanoseconds kNoTimeout = std::chrono::nanoseconds::max();

// True when `target` is the loop's own executor: itself (a handler bound to it), or inside an
// any_io_executor (a coroutine's on the loop), also when that is erased once more (a handler's
// any_completion_executor keeps it as its base type).
template <class Executor>
bool is_loop_executor(const Executor& target, loop_executor loop) {
  if (const auto* e = target.template target<loop_executor>()) return *e == loop;
  if constexpr (!std::is_same_v<Executor, asio::any_io_executor>) {
    if (const auto* any = target.template target<asio::any_io_executor::base_type>())
      if (const auto* e = any->template target<loop_executor>()) return *e == loop;
  }
  return false;
}

namespace detail {
// The eventfd behind a caller-driven loop's wakeup fd; shared, so that a poster can still signal
// it after its post, when a handler may already have destroyed the loop.
class LoopWakeup;
// Taken before a post from outside the loop: null unless the loop has a wakeup fd.
std::shared_ptr<LoopWakeup> wakeup_for_post(loop_executor loop);
void signal(LoopWakeup& wakeup) noexcept;
// Taken before a post from outside the loop: null unless the loop has a keeper (start_keeper()).
std::shared_ptr<LoopWakeup> keeper_for_post(loop_executor loop);
// The keeper drives at once (a thread waits for the work without driving the loop).
void nudge(LoopWakeup& wakeup) noexcept;

// A handler whose executor is the loop's own inside an any_io_executor (a coroutine on the loop)
// is erased bound to the loop executor itself: finding its executor at completion then costs no
// allocation (Asio wraps a nested any_io_executor in a shared, heap-allocated target) and the
// completion can tell it may run inline.
template <class Signature, class Handler>
asio::any_completion_handler<Signature> erase_for_loop(loop_executor loop, Handler handler) {
  if constexpr (std::is_same_v<asio::associated_executor_t<Handler, loop_executor>, asio::any_io_executor>) {
    if (is_loop_executor(asio::get_associated_executor(handler, loop), loop))
      return asio::any_completion_handler<Signature>(asio::bind_executor(loop, std::move(handler)));
  }
  return asio::any_completion_handler<Signature>(std::move(handler));
}

template <class Token>
inline constexpr bool is_use_future = false;
template <class Allocator>
inline constexpr bool is_use_future<asio::use_future_t<Allocator>> = true;
}  // namespace detail

// Posts f to the loop from any thread (a loop driven from an outside selector learns of it).
template <class F>
void post_to_loop(loop_executor loop, F&& f) {
  const auto wakeup = detail::wakeup_for_post(loop);
  asio::post(loop, std::forward<F>(f));
  if (wakeup) detail::signal(*wakeup);
}

// Runs init(any_completion_handler<Signature>) on the loop thread (inline when already there).
// A std::future is waited for without driving the loop: with use_future, a keeper drives at once.
template <class Signature, class Token, class Init>
auto async_on_loop(loop_executor loop, Token&& token, Init&& init) {
  return asio::async_initiate<Token, Signature>(
      [loop](auto handler, auto start) mutable {
        asio::any_completion_handler<Signature> erased = detail::erase_for_loop<Signature>(loop, std::move(handler));
        if (loop.running_in_this_thread()) return start(std::move(erased));  // what dispatch does, unwrapped
        const auto wakeup = detail::wakeup_for_post(loop);
        std::shared_ptr<detail::LoopWakeup> keeper;
        if constexpr (detail::is_use_future<std::decay_t<Token>>) keeper = detail::keeper_for_post(loop);
        asio::dispatch(loop,
                       [erased = std::move(erased), start = std::move(start)]() mutable { start(std::move(erased)); });
        if (wakeup) detail::signal(*wakeup);
        if (keeper) detail::nudge(*keeper);
      },
      token, std::forward<Init>(init));
}

// Completes a handler later: queued on the loop, then run on the handler's associated executor.
template <class Signature, class... Args>
void complete_later(loop_executor loop, asio::any_completion_handler<Signature> handler, Args&&... args) {
  asio::post(loop, asio::append(std::move(handler), std::forward<Args>(args)...));
}

}  // namespace hmc::runtime
