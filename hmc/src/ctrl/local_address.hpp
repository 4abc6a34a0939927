#pragma once
// Whether an IP address belongs to this host (loopback or one of its interfaces).
#include <string>

namespace hmc::detail {

bool is_local_address(const std::string& host);

}  // namespace hmc::detail
