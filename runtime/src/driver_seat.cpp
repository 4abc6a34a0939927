#include "driver_seat.hpp"

#include <algorithm>

#include "hmc/runtime/event_loop.hpp"

namespace hmc::runtime::detail {

namespace {
// The keeper's nap while a caller is between registering as a follower and leading or leaving.
constexpr std::chrono::microseconds kWaiterSettle{100};
}  // namespace

DriverSeat::DriverSeat(asio::io_context& io, LoopWakeup& wakeup) : io_(io), wakeup_(wakeup) {}

DriverSeat::~DriverSeat() = default;

bool DriverSeat::lead(const std::function<bool()>& done, clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  Waiter self(done);
  for (bool first = true;; first = false) {
    // The caller just computed its deadline: the clock is read only after a wait.
    if (done() || io_.stopped() || (!first && clock::now() >= deadline)) return false;
    if (!leading_) break;
    waiters_.push_back(&self);
    ++waiter_count_;  // before done() is checked again in the wait: pairs with wake_done_waiters
    if (keeper_leading_) asio::post(io_, [] {});  // wakes the keeper, which steps aside for followers
    self.cv.wait_until(lock, deadline, [&] { return self.woken || !leading_ || done(); });
    std::erase(waiters_, &self);
    --waiter_count_;
    self.woken = false;
  }
  leading_ = true;
  driver_.store(std::this_thread::get_id());
  return true;
}

bool DriverSeat::try_take(bool consume_if_refused) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (leading_ || io_.stopped()) {
    if (consume_if_refused) wakeup_.consume();
    return false;
  }
  leading_ = true;
  driver_.store(std::this_thread::get_id());
  return true;
}

void DriverSeat::wake_done_waiters() {
  // An RMW, not a load: it orders the handler's effect before the count against the follower's
  // increment (one of the two reads the other), so a follower that registers now is never missed.
  if (waiter_count_.fetch_add(0, std::memory_order_seq_cst) == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  for (Waiter* w : waiters_) {
    if (!w->woken && (*w->done)()) {
      w->woken = true;
      w->cv.notify_one();
    }
  }
}

void DriverSeat::leave() noexcept {
  driver_.store(std::thread::id{});
  std::unique_ptr<EventLoop> loop;
  std::shared_ptr<void> first;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    leading_ = false;
    keeper_leading_ = false;
    ++leaves_;  // a count, not a clock read (0.1-0.2 us in a VM): blocking calls leave once or twice each
    for (Waiter* w : waiters_) w->cv.notify_one();
    if (keeper_awaits_leave_) wakeup_.ring();  // once per stream of callers, not per call
    loop = std::move(deferred_loop_);
    first = std::move(deferred_first_);
  }
  first.reset();
  loop.reset();
}

std::optional<DriverSeat::clock::duration> DriverSeat::keeper_turn(clock::duration yield) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (io_.stopped()) return std::nullopt;
  // While a caller drives it runs everything: wait for its leave (which rings only while we wait
  // for it), not for a fixed nap that could outlast it by up to 10 ms while posts wait.
  keeper_awaits_leave_ = leading_;
  if (leading_) return 10 * yield;
  // A caller is taking the seat or just left it; nobody rings for that, so look again soon.
  // (A `yield` nap here could swallow a nudge's ring, leaving work a future waits for unrun.)
  if (waiter_count_.load() != 0) return std::min<clock::duration>(yield, kWaiterSettle);
  if (leaves_ != keeper_seen_leaves_ && !wakeup_.nudged.load()) {
    // Someone drove since the last look: a whole `yield` without a leave before driving.
    keeper_seen_leaves_ = leaves_;
    return yield;
  }
  leading_ = true;
  keeper_leading_ = true;
  driver_.store(std::this_thread::get_id());
  return clock::duration::zero();
}

void DriverSeat::defer_teardown(std::unique_ptr<EventLoop> loop, std::shared_ptr<void> first) {
  std::lock_guard<std::mutex> lock(mutex_);
  deferred_first_ = std::move(first);
  deferred_loop_ = std::move(loop);
}

}  // namespace hmc::runtime::detail
