#pragma once
// The completion of one operation that a thread blocks on: set once from the loop, waited for with
// a deadline. Lighter than std::promise and std::future (whose set_value makes a futex call even when
// nobody sleeps): setting it makes a system call only when the waiter is asleep.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>

namespace hmc::runtime {

class OneShot {
 public:
  using clock = std::chrono::steady_clock;

  // The operation's outcome (null: success). Call once.
  void set(std::exception_ptr error) noexcept {
    error_ = std::move(error);
    if (state_.exchange(kDone, std::memory_order_acq_rel) == kSleeping) {
      std::lock_guard<std::mutex> lock(mutex_);  // the sleeper is inside wait() or about to be
      cv_.notify_one();
    }
  }

  bool ready() const noexcept { return state_.load(std::memory_order_acquire) == kDone; }

  // Checks for completion for up to `limit` without sleeping (a completion microseconds away then
  // costs no futex sleep and wakeup); returns ready().
  bool spin(clock::duration limit) const noexcept {
    const auto until = clock::now() + limit;
    for (int i = 1;; ++i) {
      if (ready()) return true;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();  // lets a sibling hyperthread (perhaps the loop's) run meanwhile
#endif
      if (i % 16 == 0 && clock::now() >= until) return ready();  // a clock read costs more than the flag
    }
  }

  // Sleeps until set() or the deadline; returns ready(). One waiter at a time.
  bool wait_until(clock::time_point deadline) {
    if (ready()) return true;
    std::unique_lock<std::mutex> lock(mutex_);
    int expected = kPending;
    if (!state_.compare_exchange_strong(expected, kSleeping, std::memory_order_acq_rel)) return true;
    cv_.wait_until(lock, deadline, [&] { return ready(); });
    return ready();
  }

  // After ready(): the error set() got (null on success).
  const std::exception_ptr& error() const noexcept { return error_; }

 private:
  static constexpr int kPending = 0, kSleeping = 1, kDone = 2;
  std::atomic<int> state_{kPending};
  std::exception_ptr error_;
  std::mutex mutex_;
  std::condition_variable cv_;
};

}  // namespace hmc::runtime
