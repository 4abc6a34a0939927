#pragma once
// HMC's C++ log lines on their way to a Python logger. The runtime's log hook runs on whatever
// thread logs (the loop thread included): it only appends to a bounded list and signals an eventfd
// on the empty -> non-empty edge, never takes the GIL and never blocks on Python.
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hmc/error.hpp"
#include "hmc/runtime/log.hpp"

namespace hmc::python {

class LogQueue {
 public:
  static constexpr std::size_t kMaxLines = 4096;  // beyond this lines are counted and dropped

  LogQueue() : efd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (efd_ < 0) throw Error(Status::ERROR, "eventfd for the log queue failed");
  }
  ~LogQueue() { ::close(efd_); }
  LogQueue(const LogQueue&) = delete;
  LogQueue& operator=(const LogQueue&) = delete;

  int fd() const noexcept { return efd_; }

  void push(runtime::LogLevel level, std::string_view message) {
    bool wake = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (lines_.size() >= kMaxLines) {
        ++dropped_;
        return;
      }
      wake = lines_.empty();
      lines_.emplace_back(level, std::string(message));
    }
    if (wake) {
      const std::uint64_t one = 1;
      [[maybe_unused]] const ssize_t n = ::write(efd_, &one, sizeof one);
    }
  }

  // The lines since the last drain, and how many were dropped because the list was full.
  std::pair<std::vector<std::pair<runtime::LogLevel, std::string>>, std::uint64_t> drain() {
    std::uint64_t count = 0;
    [[maybe_unused]] const ssize_t n = ::read(efd_, &count, sizeof count);
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::pair<runtime::LogLevel, std::string>> out(std::make_move_iterator(lines_.begin()),
                                                               std::make_move_iterator(lines_.end()));
    lines_.clear();
    return {std::move(out), std::exchange(dropped_, 0)};
  }

 private:
  int efd_;
  std::mutex mutex_;
  std::deque<std::pair<runtime::LogLevel, std::string>> lines_;
  std::uint64_t dropped_ = 0;
};

}  // namespace hmc::python
