#pragma once
// What the verbs suites share: each runs over the EMULATED fabric ("emulated", always) and over
// rdma-core's first device ("device"), which skips with its reason where there is none.
#include <string>

#include "verbs/verbs_api.hpp"

namespace hmc::test {

inline bool rdma_device_present() { return !detail::make_ibverbs_api()->devices().empty(); }

// Why a case cannot run here; empty when it can.
inline std::string rdma_skip_reason(bool emulated) {
  if (emulated || rdma_device_present()) return {};
  return "no RDMA device: ibv_get_device_list lists none (the device cases need a host with an RDMA NIC)";
}

}  // namespace hmc::test
