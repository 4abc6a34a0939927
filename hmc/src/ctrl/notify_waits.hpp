#pragma once
// One peer's wait_notify waits: tags awaited by value, taken out of the inbox's order.
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>

#include "hmc/runtime/async_op.hpp"

namespace hmc::detail {

using runtime::error_code;

class NotifyWaits {
 public:
  using Handler = runtime::asio::any_completion_handler<void(error_code)>;
  // Pending waits per peer; one more fails with INVALID_ARGUMENT (a bounded table, whatever callers do).
  static constexpr std::size_t kMaxWaits = 4096;

  explicit NotifyWaits(runtime::loop_executor loop) : state_(std::make_shared<State>(loop)) {}
  // A peer replaced by its reconnection: its pending waits fail with operation_aborted.
  ~NotifyWaits() { state_->fail_all(runtime::asio::error::operation_aborted); }
  NotifyWaits(const NotifyWaits&) = delete;
  NotifyWaits& operator=(const NotifyWaits&) = delete;

  // A tag arrived: true when a wait asks for it (it then counts for that wait and is never queued).
  bool offer(std::uint64_t tag);
  // Counts still missing for `tag` over all its waits, and what is credited: how many of `tag`
  // the inbox may give up for a wait about to start with `count`.
  std::uint64_t wanted(std::uint64_t tag, std::uint64_t count) const;
  // Waits for `count` tags equal to `tag`, `found` of them just taken from the inbox. Completes at
  // once with the close reason when the peer is gone and not enough arrived before.
  void wait(std::uint64_t tag, std::uint64_t count, std::uint64_t found, std::chrono::nanoseconds timeout, Handler h);
  // Pending waits fail with `why`, and so do later ones that arrived tags do not satisfy.
  void close(error_code why) { state_->close(why); }
  std::size_t size() const noexcept { return state_->waiting.size(); }

 private:
  struct Waiter {
    std::uint64_t tag = 0;
    std::uint64_t need = 0;
    Handler handler;
    std::optional<runtime::asio::steady_timer> timer;
  };

  struct State {
    explicit State(runtime::loop_executor l) : loop(l) {}
    void settle(std::uint64_t tag);
    void finish(std::map<std::uint64_t, Waiter>::iterator it, error_code ec);
    void close(error_code why);
    void fail_all(error_code why);

    runtime::loop_executor loop;
    std::map<std::uint64_t, Waiter> waiting;        // by id: the oldest wait for a tag is served first
    std::map<std::uint64_t, std::uint64_t> credit;  // tags taken for waits and not yet handed to one
    std::uint64_t next_id = 0;
    std::optional<error_code> reason;
  };

  std::shared_ptr<State> state_;
};

}  // namespace hmc::detail
