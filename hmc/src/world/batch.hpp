#pragma once
// Operations of one step, awaited together (loop thread only).
#include <optional>

#include "world/connector.hpp"

namespace hmc::detail {

// The first fault ends the wait; late completions still land here (it outlives the waiting coroutine).
class Batch {
 public:
  explicit Batch(runtime::loop_executor ex) : wake_(ex) {}
  void add() { ++pending_; }
  // After the first fault the batch's collective is over for its caller, whose memory it may no longer touch.
  bool failed() const { return fault_.has_value(); }
  void done(std::optional<Fault> f) {
    --pending_;
    if (f && !fault_) fault_ = std::move(f);
    if (pending_ == 0 || (fault_ && !settling_)) wake_.cancel();
  }
  asio::awaitable<void> wait() {
    while (pending_ > 0 && !fault_) {
      wake_.expires_at(time_point::max());
      runtime::error_code ignored;
      co_await wake_.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
    }
    if (fault_) throw *fault_;
  }
  // wait(), but on a fault first let what is still in flight finish (until `settle_by`): their
  // bytes may land in the caller's memory, which must not be handed back while they can.
  asio::awaitable<void> wait_settled(time_point settle_by) {
    while (pending_ > 0 && !fault_) {
      wake_.expires_at(time_point::max());
      runtime::error_code ignored;
      co_await wake_.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
    }
    if (fault_) {
      co_await drain(settle_by);
      throw *fault_;
    }
  }
  // Waits until nothing is in flight (or `until`), fault or not.
  asio::awaitable<void> drain(time_point until) {
    settling_ = true;
    while (pending_ > 0 && std::chrono::steady_clock::now() < until) {
      wake_.expires_at(until);
      runtime::error_code ignored;
      co_await wake_.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
    }
    settling_ = false;
  }

 private:
  asio::steady_timer wake_;
  std::size_t pending_ = 0;
  std::optional<Fault> fault_;
  bool settling_ = false;
};

}  // namespace hmc::detail
