#include "ucx/ucx_context.hpp"

#include <ucs/debug/log_def.h>
#include <uct/api/uct.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "hmc/error.hpp"
#include "hmc/runtime/log.hpp"

namespace hmc::detail {

namespace {
std::string seconds(std::chrono::milliseconds d) {
  return std::to_string(std::max<long long>(1, d.count() / 1000)) + "s";
}

// `setting` is ucx_tls_setting's result: an exclusion list always excludes tcp.
bool names_tcp(const std::string& setting) {
  return !setting.starts_with('^') && ("," + setting + ",").find(",tcp,") != std::string::npos;
}
spdlog::level::level_enum level_of(ucs_log_level_t l) {
  switch (l) {
    case UCS_LOG_LEVEL_FATAL:
    case UCS_LOG_LEVEL_ERROR: return spdlog::level::err;
    case UCS_LOG_LEVEL_WARN: return spdlog::level::warn;
    case UCS_LOG_LEVEL_DIAG:
    case UCS_LOG_LEVEL_INFO: return spdlog::level::info;
    case UCS_LOG_LEVEL_DEBUG: return spdlog::level::debug;
    default: return spdlog::level::trace;
  }
}

// UCX's own messages join ours (stderr or the user's log hook) instead of the program's stdout.
// UCX filters by UCX_LOG_LEVEL before calling this; it may call from its async thread.
ucs_log_func_rc_t ucx_log_to_hmc(const char* file, unsigned line, const char*, ucs_log_level_t level,
                                 const ucs_log_component_config_t*, const char* format, va_list ap) {
  char text[1024];
  std::vsnprintf(text, sizeof text, format, ap);
  const char* base = std::strrchr(file, '/');
  runtime::log().log(level_of(level), "UCX {}:{} {}", base != nullptr ? base + 1 : file, line, text);
  return UCS_LOG_FUNC_RC_STOP;
}
// The UCT components this UCX was built with (posix, sysv, cma, tcp, ...): a transport named in
// UCX_TLS that is missing draws a warning from UCX.
std::vector<std::string> available_components() {
  std::vector<std::string> out;
  uct_component_h* components = nullptr;
  unsigned count = 0;
  if (uct_query_components(&components, &count) != UCS_OK) return out;
  for (unsigned i = 0; i < count; ++i) {
    uct_component_attr_t attr{};
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
    if (uct_component_query(components[i], &attr) == UCS_OK) out.emplace_back(attr.name);
  }
  uct_release_component_list(components);
  return out;
}
}  // namespace

std::string ucx_tls_setting(const std::string& list, const std::vector<std::string>& available) {
  std::vector<std::string> names;
  for (std::size_t at = 0; at <= list.size();) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    if (comma > at) names.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  if (names.empty() || (names.size() == 1 && names[0] == "all")) return "^sysv,tcp";
  if (names[0].starts_with('^')) {
    names[0].erase(0, 1);
    std::string out = list;
    for (const char* never : {"sysv", "tcp"})
      if (std::find(names.begin(), names.end(), never) == names.end()) out += std::string(",") + never;
    return out;
  }
  std::vector<std::string> out;
  auto add = [&](const std::string& n) {
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  };
  auto add_available = [&](std::initializer_list<const char*> tls) {
    for (const char* n : tls)
      if (std::find(available.begin(), available.end(), n) != available.end()) add(n);
  };
  for (const std::string& n : names) {
    if (n == "sysv") continue;
    if (n == "shm" || n == "sm") {
      add_available({"posix", "cma", "xpmem", "knem"});
    } else if (n == "mm") {
      add_available({"posix", "xpmem"});
    } else {
      add(n);
    }
  }
  if (out.empty())
    throw InvalidConfigError(
        "UCX_TLS '" + list +
        "': SysV shared memory is not used (its segments are open to the group); use posix or shm");
  std::string joined;
  for (const auto& n : out) joined += (joined.empty() ? "" : ",") + n;
  return joined;
}

std::shared_ptr<UcxContext> UcxContext::create(const UcxContextOptions& options) {
  static std::once_flag routed;
  std::call_once(routed, [] { ucs_log_push_handler(&ucx_log_to_hmc); });
  ucp_config_t* config = nullptr;
  if (ucp_config_read(nullptr, nullptr, &config) != UCS_OK) throw Error(Status::ERROR, "ucp_config_read failed");
  std::vector<std::pair<std::string, std::string>> settings;
  // Same-host peers share memory through posix segments, which UCX opens through /proc/<pid>/fd
  // (this user only), never SysV, whose segments UCX creates with mode 0660: the session buffer
  // was readable and writable by the group. The buffer comes from posix (ALLOC_PRIO, no md:sysv).
  const char* env_tls = std::getenv("UCX_TLS");
  const std::string tls = ucx_tls_setting(!options.tls.empty() ? options.tls
                                          : env_tls != nullptr ? env_tls
                                                               : "",
                                          available_components());
  settings.emplace_back("TLS", tls);
  static std::once_flag warned;
  if (names_tcp(tls))
    std::call_once(warned, [] {
      runtime::log().warn("UCX_TLS names tcp: UCX's tcp serves any connection without the key and reads and writes "
                          "at any address it is sent; use it on trusted networks only (docs/security.md)");
    });
  settings.emplace_back("ALLOC_PRIO", "md:posix,huge,thp,mmap,heap");
  // The address format check_worker_address walks (UCX 1.13's defaults, whatever the environment says).
  settings.emplace_back("ADDRESS_VERSION", "v1");
  settings.emplace_back("UNIFIED_MODE", "n");
  if (!options.net_devices.empty()) settings.emplace_back("NET_DEVICES", options.net_devices);
  if (options.keepalive.count() > 0) {
    if (names_tcp(tls)) {
      // UCX's own keepalive sends a message: on tcp that data, unacknowledged by a silent peer,
      // stops the kernel's keepalive probes (retransmissions take ~15 min instead). So on tcp the
      // socket keepalive of the connection UCX opened does the work; docs/failure-model.md "Keepalive".
      settings.emplace_back("KEEPALIVE_INTERVAL", "inf");
      settings.emplace_back("KEEPIDLE", seconds(options.keepalive));
      settings.emplace_back("KEEPINTVL", seconds(std::max(std::chrono::milliseconds(1000), options.keepalive / 5)));
      settings.emplace_back("KEEPCNT", "3");
    } else {
      settings.emplace_back("KEEPALIVE_INTERVAL", seconds(options.keepalive));
    }
  }
  for (const auto& [name, value] : settings) {
    const ucs_status_t s = ucp_config_modify(config, name.c_str(), value.c_str());
    if (s != UCS_OK) {
      ucp_config_release(config);
      throw InvalidConfigError("UCX_" + name + " '" + value + "' rejected: " + ucs_status_string(s));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_REQUEST_SIZE;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.request_size = kRequestSize;
  std::shared_ptr<UcxContext> ctx(new UcxContext());
  const ucs_status_t s = ucp_init(&params, config, &ctx->context_);
  ucp_config_release(config);
  if (s != UCS_OK) throw Error(Status::ERROR, std::string("ucp_init failed: ") + ucs_status_string(s));
  return ctx;
}

std::vector<MemoryType> UcxContext::memory_types() const {
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucp_context_query(context_, &attr) != UCS_OK) return {MemoryType::CPU};
  std::vector<MemoryType> out{MemoryType::CPU};
  if ((attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0) out.push_back(MemoryType::NVIDIA_GPU);
  if ((attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_ROCM)) != 0) out.push_back(MemoryType::AMD_GPU);
  return out;
}

UcxContext::~UcxContext() {
  if (context_ != nullptr) ucp_cleanup(context_);
}

}  // namespace hmc::detail
