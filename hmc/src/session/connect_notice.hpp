#pragma once
#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "hmc/runtime/event_loop.hpp"
#include "hmc/runtime/log.hpp"

namespace hmc::detail {

// While a connect() waits, a warning every kConnectNotice says for whom and at what stage, so that
// a user whose peer is not running sees why nothing happens instead of silence until the timeout.
class ConnectNotice {
 public:
  static constexpr std::chrono::seconds kConnectNotice{5};

  ConnectNotice(runtime::EventLoop& loop, std::string whom, std::chrono::milliseconds budget)
      : loop_(loop), state_(std::make_shared<State>(loop.executor(), std::move(whom), budget)) {
    loop_.call([s = state_] { arm(s); });
  }
  ~ConnectNotice() {
    try {
      loop_.call([s = state_] {
        s->over = true;
        s->timer.cancel();
      });
    } catch (const std::exception& e) {
      runtime::log().debug("connect notice: {}", e.what());
    }
  }
  ConnectNotice(const ConnectNotice&) = delete;
  ConnectNotice& operator=(const ConnectNotice&) = delete;

  void control_connected() noexcept { state_->control_up = true; }

 private:
  struct State {
    State(runtime::loop_executor ex, std::string w, std::chrono::milliseconds b)
        : timer(ex), whom(std::move(w)), budget(b) {}
    runtime::asio::steady_timer timer;
    std::string whom;
    std::chrono::milliseconds budget;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    std::atomic<bool> control_up{false};
    bool over = false;  // loop thread only
  };

  static void arm(const std::shared_ptr<State>& s) {
    s->timer.expires_after(kConnectNotice);
    s->timer.async_wait([s](runtime::error_code ec) {
      if (ec || s->over) return;
      const auto waited = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - s->start);
      runtime::log().warn("connect: still connecting to {} ({} s of {} s): {}", s->whom, waited.count(),
                          std::chrono::ceil<std::chrono::seconds>(s->budget).count(),
                          s->control_up ? "the control connection is up; waiting for the data connection"
                                        : "no control connection yet (is the peer running, and listening on that "
                                          "port?)");
      arm(s);
    });
  }

  runtime::EventLoop& loop_;
  std::shared_ptr<State> state_;
};

}  // namespace hmc::detail
