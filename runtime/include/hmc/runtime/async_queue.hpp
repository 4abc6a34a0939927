#pragma once
// An unbounded FIFO whose pop is an asynchronous operation with a timeout and per-op cancellation.
// push/close run on the loop thread; async_pop may be started from any thread.
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "hmc/runtime/async_op.hpp"

namespace hmc::runtime {

template <class T>
class AsyncQueue {
 public:
  using Signature = void(error_code, T);

  explicit AsyncQueue(loop_executor loop) : state_(std::make_shared<State>(loop)) {}
  ~AsyncQueue() { state_->close_now(asio::error::operation_aborted); }
  AsyncQueue(const AsyncQueue&) = delete;
  AsyncQueue& operator=(const AsyncQueue&) = delete;

  // Hands the value to the oldest waiter or buffers it. Loop thread only.
  void push(T value) { state_->push(std::move(value)); }

  // Buffered items still pop; after them every pop fails with `reason`. Loop thread only.
  void close(error_code reason) { state_->close(reason); }

  // Removes up to `max` buffered items that `pred` accepts, oldest first, and returns them; the
  // others keep their order. Loop thread only.
  template <class Pred>
  std::vector<T> take_if(Pred pred, std::size_t max) {
    std::vector<T> out;
    auto& items = state_->items;
    for (auto it = items.begin(); it != items.end() && out.size() < max;) {
      if (pred(*it)) {
        out.push_back(std::move(*it));
        it = items.erase(it);
      } else {
        ++it;
      }
    }
    return out;
  }

  bool closed() const noexcept { return state_->reason.has_value(); }
  std::size_t size() const noexcept { return state_->items.size(); }
  std::size_t waiters() const noexcept { return state_->waiting.size(); }

  // Completes with (ec, value): asio::error::timed_out after `timeout`, operation_aborted when
  // cancelled through the handler's cancellation slot, or the close reason.
  template <class Token>
  auto async_pop(std::chrono::nanoseconds timeout, Token&& token) {
    return async_on_loop<Signature>(
        state_->loop, std::forward<Token>(token),
        [s = state_, timeout](asio::any_completion_handler<Signature> h) mutable { s->pop(s, timeout, std::move(h)); });
  }

 private:
  struct Waiter {
    asio::any_completion_handler<Signature> handler;
    std::optional<asio::steady_timer> timer;
  };

  struct State {
    explicit State(loop_executor l) : loop(l) {}

    loop_executor loop;
    std::deque<T> items;
    std::map<std::uint64_t, Waiter> waiting;  // ordered by id: FIFO
    std::uint64_t next_id = 0;
    std::optional<error_code> reason;

    void push(T value) {
      if (reason) return;  // nothing arrives after close
      if (waiting.empty()) {
        items.push_back(std::move(value));
        return;
      }
      finish(waiting.begin(), error_code{}, std::move(value));
    }

    void close(error_code why) {
      if (reason) return;
      reason = why;
      if (!items.empty()) return;  // waiters exist only while items is empty
      while (!waiting.empty()) finish(waiting.begin(), why, T{});
    }

    void close_now(error_code why) {
      items.clear();
      reason.reset();
      close(why);
    }

    void pop(const std::shared_ptr<State>& self, std::chrono::nanoseconds timeout,
             asio::any_completion_handler<Signature> h) {
      if (!items.empty()) {
        T value = std::move(items.front());
        items.pop_front();
        complete_later(loop, std::move(h), error_code{}, std::move(value));
        return;
      }
      if (reason) {
        complete_later(loop, std::move(h), *reason, T{});
        return;
      }
      const std::uint64_t id = next_id++;
      auto slot = asio::get_associated_cancellation_slot(h);
      if (slot.is_connected()) {
        slot.assign([weak = std::weak_ptr<State>(self), id](asio::cancellation_type) {
          if (auto s = weak.lock())
            post_to_loop(s->loop, [weak, id] {
              if (auto st = weak.lock()) st->expire(id, asio::error::operation_aborted);
            });
        });
      }
      Waiter& w = waiting.emplace(id, Waiter{std::move(h), std::nullopt}).first->second;
      if (timeout != kNoTimeout) {
        w.timer.emplace(loop, timeout);
        w.timer->async_wait([weak = std::weak_ptr<State>(self), id](const error_code& ec) {
          if (ec) return;
          if (auto s = weak.lock()) s->expire(id, asio::error::timed_out);
        });
      }
    }

    void expire(std::uint64_t id, error_code why) {
      auto it = waiting.find(id);
      if (it != waiting.end()) finish(it, why, T{});
    }

    void finish(typename std::map<std::uint64_t, Waiter>::iterator it, error_code ec, T value) {
      Waiter w = std::move(it->second);
      waiting.erase(it);
      if (w.timer) w.timer->cancel();
      auto slot = asio::get_associated_cancellation_slot(w.handler);
      if (slot.is_connected()) slot.clear();
      complete_later(loop, std::move(w.handler), ec, std::move(value));
    }
  };

  std::shared_ptr<State> state_;
};

}  // namespace hmc::runtime
