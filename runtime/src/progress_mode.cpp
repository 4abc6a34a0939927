#include "hmc/runtime/progress_mode.hpp"

namespace hmc::runtime {

std::string_view to_string(ProgressMode mode) noexcept {
  switch (mode) {
    case ProgressMode::event: return "event";
    case ProgressMode::poll: return "poll";
    case ProgressMode::adaptive: return "adaptive";
  }
  return "unknown";
}

std::optional<ProgressMode> parse_progress_mode(std::string_view text) noexcept {
  if (text == "event") return ProgressMode::event;
  if (text == "poll") return ProgressMode::poll;
  if (text == "adaptive") return ProgressMode::adaptive;
  return std::nullopt;
}

}  // namespace hmc::runtime
