#pragma once
// The UCX context (ucp_context_h), shared by the transport's worker and by buffers UCX allocated,
// so that it outlives both whatever order they go in.
#include <ucp/api/ucp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hmc/memory_type.hpp"

namespace hmc::detail {

struct UcxContextOptions {
  std::string tls;          // UCX_TLS for this context; empty: the environment's (either without SysV)
  std::string net_devices;  // UCX_NET_DEVICES; empty keeps the environment's
  // How long a silent peer in peer-failure mode may go unnoticed: the tcp transport's socket
  // keepalive (UCX_TCP_KEEPIDLE/KEEPINTVL/KEEPCNT), else UCX_KEEPALIVE_INTERVAL; zero keeps UCX's
  // defaults and the environment's.
  std::chrono::milliseconds keepalive{0};
};

// The UCX_TLS value a context uses for `list` (a UCX_TLS value; empty means UCX's default, all):
// never SysV shared memory (its segments are open to the group), and UCX's tcp only where the
// list names it (it serves any connection, keyless, at any address: peers without shared memory
// or RDMA get HMC's checked TCP path instead). The aliases shm, sm and mm become the transports
// they stand for that `available` has, minus sysv. InvalidConfigError when nothing is left.
std::string ucx_tls_setting(const std::string& list, const std::vector<std::string>& available);

class UcxContext {
 public:
  // Every UCX request carries this many bytes for the transport (the token of its post).
  static constexpr std::size_t kRequestSize = sizeof(std::uint64_t);

  static std::shared_ptr<UcxContext> create(const UcxContextOptions& options);
  ~UcxContext();
  UcxContext(const UcxContext&) = delete;
  UcxContext& operator=(const UcxContext&) = delete;

  ucp_context_h get() const noexcept { return context_; }
  // The memory types this UCX moves itself (ucp_context_query): CPU, plus NVIDIA_GPU / AMD_GPU
  // when UCX was built with CUDA / ROCm support (Debian's is not).
  std::vector<MemoryType> memory_types() const;

 private:
  UcxContext() = default;
  ucp_context_h context_ = nullptr;
};

}  // namespace hmc::detail
