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
  void done(std::optional<Fault> f) {
    --pending_;
    if (f && !fault_) fault_ = std::move(f);
    if (pending_ == 0 || fault_) wake_.cancel();
  }
  asio::awaitable<void> wait() {
    while (pending_ > 0 && !fault_) {
      wake_.expires_at(time_point::max());
      runtime::error_code ignored;
      co_await wake_.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
    }
    if (fault_) throw *fault_;
  }

 private:
  asio::steady_timer wake_;
  std::size_t pending_ = 0;
  std::optional<Fault> fault_;
};

}  // namespace hmc::detail
