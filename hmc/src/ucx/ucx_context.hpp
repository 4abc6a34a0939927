#pragma once
// The UCX context (ucp_context_h), shared by the transport's worker and by buffers UCX allocated,
// so that it outlives both whatever order they go in.
#include <ucp/api/ucp.h>

#include <memory>
#include <string>

namespace hmc::detail {

class UcxContext {
 public:
  // tls / net_devices: UCX_TLS / UCX_NET_DEVICES for this context; empty keeps the environment's.
  static std::shared_ptr<UcxContext> create(const std::string& tls, const std::string& net_devices);
  ~UcxContext();
  UcxContext(const UcxContext&) = delete;
  UcxContext& operator=(const UcxContext&) = delete;

  ucp_context_h get() const noexcept { return context_; }

 private:
  UcxContext() = default;
  ucp_context_h context_ = nullptr;
};

}  // namespace hmc::detail
