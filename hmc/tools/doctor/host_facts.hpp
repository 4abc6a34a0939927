#pragma once
// What the host offers HMC, read without a session: UCX, network interfaces, RDMA ports, the key.
#include <string>
#include <utility>
#include <vector>

namespace hmc::doctor {

inline constexpr const char* kRdmaSysfs = "/sys/class/infiniband";

struct RdmaDevice {
  std::string name;                                // e.g. "mlx5_0"
  std::vector<std::pair<int, std::string>> ports;  // (port, state as sysfs says it, e.g. "4: ACTIVE")
};

struct KeyFacts {
  std::vector<std::pair<std::string, std::string>> info;  // source, path, then state or mode
  std::string problem;                                    // empty: a session would accept it
};

// The UCX library HMC runs on, as it names itself (ucp_get_version_string).
std::string ucx_version();

// Interface names in index order (if_nameindex).
std::vector<std::string> interface_names();

// Devices by name with their ports by number, from sysfs; empty without RDMA kernel modules.
std::vector<RdmaDevice> rdma_devices();

// Where the shared key comes from (HMC_AUTH_KEY, else the key file the library would read) and
// what is wrong with it: a key file that is not a regular file, or others can read, or another owns.
KeyFacts auth_key();

}  // namespace hmc::doctor
