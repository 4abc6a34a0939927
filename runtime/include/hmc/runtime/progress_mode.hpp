#pragma once
// How the event loop waits for an external progress source (UCX worker, verbs CQ).
#include <optional>
#include <string_view>

namespace hmc::runtime {

enum class ProgressMode {
  event,     // progress until idle, arm, sleep on the fd: ~0% CPU when idle, a wakeup per arrival
  poll,      // progress on every loop turn: lowest latency, one core busy
  adaptive,  // spin after activity as long as arrivals have recently come that fast, then arm (default)
};

std::string_view to_string(ProgressMode mode) noexcept;
std::optional<ProgressMode> parse_progress_mode(std::string_view text) noexcept;

}  // namespace hmc::runtime
