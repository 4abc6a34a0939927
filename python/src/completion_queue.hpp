#pragma once
// Operation ids completed on the loop thread, for the asyncio thread to drain. The loop thread
// never takes the GIL: it appends an id and writes the eventfd only when no write is pending. A
// caller-driven session's progress() collects on the asyncio thread itself: no write at all.
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "hmc/error.hpp"

namespace hmc::python {

class CompletionQueue {
 public:
  CompletionQueue() : efd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (efd_ < 0) throw Error(Status::ERROR, "eventfd for the completion queue failed");
  }
  ~CompletionQueue() { ::close(efd_); }
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

  int fd() const noexcept { return efd_; }

  void push(std::uint64_t id) {
    bool wake = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ids_.push_back(id);
      // The collecting thread drains right after its progress(): the fd would only wake itself.
      wake = !signalled_ && std::this_thread::get_id() != collector_;
      signalled_ = signalled_ || wake;
    }
    if (wake) {
      const std::uint64_t one = 1;
      [[maybe_unused]] const ssize_t n = ::write(efd_, &one, sizeof one);
    }
  }

  // Pushes made on this thread until stop_collecting() leave the fd alone: the caller drains next.
  void collect_here() {
    std::lock_guard<std::mutex> lock(mutex_);
    collector_ = std::this_thread::get_id();
  }
  void stop_collecting() {
    std::lock_guard<std::mutex> lock(mutex_);
    collector_ = std::thread::id{};
  }

  // Ids pushed and not drained yet (a collecting thread's own pushes leave the fd alone).
  bool has_ids() {
    std::lock_guard<std::mutex> lock(mutex_);
    return !ids_.empty();
  }

  // Resets the fd (only when it was written) together with taking the list: a push after us re-signals.
  std::vector<std::uint64_t> drain() {
    std::vector<std::uint64_t> out;
    std::lock_guard<std::mutex> lock(mutex_);
    if (signalled_) {
      std::uint64_t count = 0;
      [[maybe_unused]] const ssize_t n = ::read(efd_, &count, sizeof count);
      signalled_ = false;
    }
    out.swap(ids_);
    return out;
  }

 private:
  int efd_;
  std::mutex mutex_;
  std::vector<std::uint64_t> ids_;
  bool signalled_ = false;     // the fd holds a count not yet read
  std::thread::id collector_;  // the thread inside SessionHandle::progress(), if any
};

}  // namespace hmc::python
