#pragma once
// Log lines about connections that never authenticated, throttled: a flood of such connections
// must not become a flood of log lines. Up to `burst` lines per interval are logged one by one;
// past that they are counted and one summary line per interval says how many, with the last one.
// Loop thread only.
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>

#include "hmc/runtime/async_op.hpp"
#include "hmc/runtime/log.hpp"

namespace hmc::detail {

class ThrottledLog : public std::enable_shared_from_this<ThrottledLog> {
 public:
  using clock = std::chrono::steady_clock;

  ThrottledLog(runtime::loop_executor ex, std::string subject, std::size_t burst = 10,
               std::chrono::milliseconds interval = std::chrono::seconds(1))
      : subject_(std::move(subject)), burst_(burst), interval_(interval), timer_(ex) {}

  void warn(std::string line) { add(runtime::LogLevel::warn, std::move(line)); }
  void error(std::string line) { add(runtime::LogLevel::error, std::move(line)); }

  // Logs the pending summary now (the server is closing).
  void flush() {
    timer_.cancel();
    summarize();
  }

 private:
  void add(runtime::LogLevel level, std::string line) {
    const auto now = clock::now();
    if (suppressed_ == 0 && now - window_start_ >= interval_) {
      window_start_ = now;
      in_window_ = 0;
    }
    if (in_window_ < burst_) {
      ++in_window_;
      emit(level, line);
      return;
    }
    if (suppressed_++ == 0) {
      timer_.expires_at(window_start_ + interval_);
      timer_.async_wait([weak = weak_from_this()](runtime::error_code ec) {
        auto self = weak.lock();
        if (ec || !self) return;
        self->summarize();
        // The flood may go on: the next interval is summarized too, not logged line by line.
        self->window_start_ = clock::now();
        self->in_window_ = self->burst_;
      });
    }
    level_ = std::max(level_, level);
    last_ = std::move(line);
  }

  void summarize() {
    if (suppressed_ == 0) return;
    emit(level_, subject_ + ": " + std::to_string(suppressed_) +
                     " more like this not logged one by one (the last: " + last_ + ")");
    suppressed_ = 0;
    level_ = runtime::LogLevel::trace;
  }

  static void emit(runtime::LogLevel level, const std::string& line) {
    if (level >= runtime::LogLevel::error) {
      runtime::log().error("{}", line);
    } else {
      runtime::log().warn("{}", line);
    }
  }

  std::string subject_;
  std::size_t burst_;
  std::chrono::milliseconds interval_;
  runtime::asio::steady_timer timer_;
  clock::time_point window_start_{};
  std::size_t in_window_ = 0;
  std::size_t suppressed_ = 0;
  runtime::LogLevel level_ = runtime::LogLevel::trace;
  std::string last_;
};

}  // namespace hmc::detail
