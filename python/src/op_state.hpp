#pragma once
// The shared state of one operation submitted from Python: completed on the loop thread (no GIL),
// waited for with the GIL released, or drained through the CompletionQueue by asyncio.
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>

#include "completion_queue.hpp"
#include "hmc/ctrl_message.hpp"

namespace hmc::python {

class OpState {
 public:
  OpState(std::uint64_t id, std::shared_ptr<CompletionQueue> queue) : id_(id), queue_(std::move(queue)) {}

  std::uint64_t id() const noexcept { return id_; }

  void complete(std::exception_ptr error, std::optional<CtrlMessage> message = std::nullopt) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::move(error);
      message_ = std::move(message);
      done_ = true;
    }
    cv_.notify_all();
    if (queue_) queue_->push(id_);
  }

  bool done() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }

  // Waits up to `timeout` (none: forever); call with the GIL released.
  bool wait(std::optional<std::chrono::duration<double>> timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!timeout) {
      cv_.wait(lock, [&] { return done_; });
      return true;
    }
    return cv_.wait_for(lock, *timeout, [&] { return done_; });
  }

  // After done(): rethrows the operation's error, else returns its control message (if any).
  std::optional<CtrlMessage> result() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_) std::rethrow_exception(error_);
    return message_;
  }

 private:
  const std::uint64_t id_;
  const std::shared_ptr<CompletionQueue> queue_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::optional<CtrlMessage> message_;
};

}  // namespace hmc::python
