#pragma once
// The shared state of one operation submitted from Python: completed on the loop thread (no GIL),
// waited for with the GIL released, or announced through a CompletionQueue (asyncio, callbacks).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "completion_queue.hpp"
#include "hmc/ctrl_message.hpp"
#include "hmc/runtime/deadline.hpp"

namespace hmc::python {

class OpCompletion {
 public:
  // Ids are unique in the process: one callback queue serves every session.
  OpCompletion() : id_(next_id()) {}

  std::uint64_t id() const noexcept { return id_; }

  void complete(std::exception_ptr error, std::optional<CtrlMessage> message = std::nullopt) {
    std::vector<std::shared_ptr<CompletionQueue>> queues;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::move(error);
      message_ = std::move(message);
      done_ = true;
      queues.swap(queues_);
    }
    cv_.notify_all();
    for (const auto& q : queues) q->push(id_);
  }

  // Pushes the id to `queue` once done: at once when already done, else on completion.
  void notify(std::shared_ptr<CompletionQueue> queue) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!done_) {
        queues_.push_back(std::move(queue));
        return;
      }
    }
    queue->push(id_);
  }

  bool done() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }

  // Waits up to `timeout` (none: without limit); call with the GIL released. The deadline
  // saturates, so a timeout of years (or milliseconds::max) never overflows the clock.
  bool wait(std::optional<std::chrono::milliseconds> timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!timeout) {
      cv_.wait(lock, [&] { return done_; });
      return true;
    }
    return cv_.wait_until(lock, runtime::deadline_after(*timeout), [&] { return done_; });
  }

  // Done without an error (the fast path returns at once then; any other case goes the general way).
  bool succeeded() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_ && !error_;
  }

  // After done(): rethrows the operation's error, else returns its control message (if any).
  std::optional<CtrlMessage> result() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_) std::rethrow_exception(error_);
    return message_;
  }

 private:
  static std::uint64_t next_id() {
    static std::atomic<std::uint64_t> next{1};
    return next.fetch_add(1, std::memory_order_relaxed);
  }

  const std::uint64_t id_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::optional<CtrlMessage> message_;
  std::vector<std::shared_ptr<CompletionQueue>> queues_;
};

}  // namespace hmc::python
