#pragma once
// Operation ids completed on the loop thread, for the asyncio thread to drain. The loop thread
// never takes the GIL: it appends an id and writes the eventfd only on the empty -> non-empty edge.
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>
#include <mutex>
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
      wake = ids_.empty();
      ids_.push_back(id);
    }
    if (wake) {
      const std::uint64_t one = 1;
      [[maybe_unused]] const ssize_t n = ::write(efd_, &one, sizeof one);
    }
  }

  // Reset the fd before taking the list: a push racing with us is either in this batch or re-signals.
  std::vector<std::uint64_t> drain() {
    std::uint64_t count = 0;
    [[maybe_unused]] const ssize_t n = ::read(efd_, &count, sizeof count);
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::uint64_t> out;
    out.swap(ids_);
    return out;
  }

 private:
  int efd_;
  std::mutex mutex_;
  std::vector<std::uint64_t> ids_;
};

}  // namespace hmc::python
