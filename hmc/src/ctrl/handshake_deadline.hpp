#pragma once
#include <chrono>
#include <memory>
#include <string>

#include "ctrl/ctrl_connection.hpp"
#include "hmc/runtime/event_loop.hpp"
#include "security/throttled_log.hpp"

namespace hmc::detail {

// Closes a connection when its handshake runs past the deadline: every pending read or write then
// fails, whatever stage (connect, TLS, frames) it is in.
class HandshakeDeadline {
 public:
  HandshakeDeadline(const runtime::loop_executor& ex, std::chrono::steady_clock::time_point at) : timer_(ex, at) {}
  ~HandshakeDeadline() {
    state_->over = true;  // an expiry already queued must not close a connection that made it
    timer_.cancel();
  }
  // `log_line`: logged to `log` (as an error, before the close the peer sees) when the deadline strikes.
  void watch(const std::shared_ptr<CtrlConnection>& conn, std::shared_ptr<ThrottledLog> log = nullptr,
             std::string log_line = {}) {
    timer_.async_wait([conn, state = state_, log = std::move(log), log_line = std::move(log_line)](error_code ec) {
      if (ec || state->over) return;
      state->expired = true;
      if (log) log->error(log_line);
      conn->close(make_error_code(Status::TIMEOUT), "handshake deadline");
    });
  }
  bool expired() const noexcept { return state_->expired; }
  std::chrono::steady_clock::time_point when() const { return timer_.expiry(); }

 private:
  struct State {
    bool expired = false;
    bool over = false;
  };
  asio::steady_timer timer_;
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace hmc::detail
