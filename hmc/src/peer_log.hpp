#pragma once
// The fields every warning about a peer ends with, so that a log reader (or a grep) finds the
// peer, what it was doing and the error a caller of that operation sees, in one form:
//   ucx endpoint to rank 5 failed: Endpoint timeout [peer=5 op=data error=PeerLostError]
#include <cstdint>
#include <string>
#include <string_view>

#include "hmc/error.hpp"

namespace hmc::detail {

inline std::string peer_fields(std::uint32_t rank, std::string_view op, Status kind) {
  return " [peer=" + std::to_string(rank) + " op=" + std::string(op) + " error=" + std::string(error_name(kind)) + "]";
}

}  // namespace hmc::detail
