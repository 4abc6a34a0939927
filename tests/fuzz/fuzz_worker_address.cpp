// libFuzzer target: a peer's UCX worker address. Input: the address bytes.
// Checks: check_worker_address never crashes, and whatever it accepts UCX 1.13 unpacks and connects
// to, given as a session gives it (zero-padded), without crashing or reading past that copy (an
// intercepted memcpy past it is an ASan report). A crash inside ucp_ep_create is a gap in the check.
#include <ucp/api/ucp.h>
#include <ucs/config/global_opts.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>

#include "ucx/ucx_worker_address.hpp"

// UCX 1.13 loses small arrays of a shared-memory endpoint that failed to connect (the same leak
// scripts/lsan.supp names); UCX is built without frame pointers, so only the module can match.
extern "C" const char* __lsan_default_suppressions() { return "leak:libuct.so\nleak:libucs.so\n"; }

namespace {

// One worker for the whole run, on transports that need no network: self, posix and cma.
ucp_worker_h worker() {
  static ucp_worker_h w = [] {
    ucs_global_opts.log_component.log_level = UCS_LOG_LEVEL_FATAL;  // refused connections are the norm here
    ucp_config_t* config = nullptr;
    if (ucp_config_read(nullptr, nullptr, &config) != UCS_OK) std::abort();
    ucp_config_modify(config, "TLS", "self,posix,cma");
    ucp_config_modify(config, "ADDRESS_VERSION", "v1");
    ucp_config_modify(config, "UNIFIED_MODE", "n");
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM;
    ucp_context_h context = nullptr;
    if (ucp_init(&params, config, &context) != UCS_OK) std::abort();
    ucp_config_release(config);
    ucp_worker_params_t wp{};
    ucp_worker_h created = nullptr;
    if (ucp_worker_create(context, &wp, &created) != UCS_OK) std::abort();
    return created;
  }();
  return w;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> address(reinterpret_cast<const std::byte*>(data), size);
  if (!hmc::detail::check_worker_address(address).empty()) return 0;
  // A heap copy padded as UcxTransport::add_peer pads it, and no larger.
  const auto copy = std::make_unique<std::uint8_t[]>(size + hmc::detail::kWorkerAddressPadding);
  std::copy(data, data + size, copy.get());
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  params.address = reinterpret_cast<const ucp_address_t*>(copy.get());
  ucp_ep_h ep = nullptr;
  if (ucp_ep_create(worker(), &params, &ep) != UCS_OK) return 0;
  ucp_request_param_t close{};
  close.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  close.flags = UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &close);
  if (UCS_PTR_IS_PTR(r)) {
    while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(worker());
    ucp_request_free(r);
  }
  return 0;
}
