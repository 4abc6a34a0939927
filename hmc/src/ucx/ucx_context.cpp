#include "ucx/ucx_context.hpp"

#include <utility>

#include "hmc/error.hpp"

namespace hmc::detail {

std::shared_ptr<UcxContext> UcxContext::create(const std::string& tls, const std::string& net_devices) {
  ucp_config_t* config = nullptr;
  if (ucp_config_read(nullptr, nullptr, &config) != UCS_OK) throw Error(Status::ERROR, "ucp_config_read failed");
  for (const auto& [name, value] : {std::pair{"TLS", &tls}, std::pair{"NET_DEVICES", &net_devices}}) {
    if (value->empty()) continue;
    const ucs_status_t s = ucp_config_modify(config, name, value->c_str());
    if (s != UCS_OK) {
      ucp_config_release(config);
      throw InvalidConfigError(std::string("UCX_") + name + " '" + *value + "' rejected: " + ucs_status_string(s));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  std::shared_ptr<UcxContext> ctx(new UcxContext());
  const ucs_status_t s = ucp_init(&params, config, &ctx->context_);
  ucp_config_release(config);
  if (s != UCS_OK) throw Error(Status::ERROR, std::string("ucp_init failed: ") + ucs_status_string(s));
  return ctx;
}

UcxContext::~UcxContext() {
  if (context_ != nullptr) ucp_cleanup(context_);
}

}  // namespace hmc::detail
