#pragma once
// Session stats in Prometheus' text exposition format (version 0.0.4), stable `hmc_` names.
#include <string>
#include <utility>
#include <vector>

#include "hmc/session_stats.hpp"

namespace hmc::detail {

// One block per metric family over every session; `session` labels say whose a sample is.
std::string exposition(const std::vector<std::pair<std::string, SessionStats>>& sessions);

}  // namespace hmc::detail
