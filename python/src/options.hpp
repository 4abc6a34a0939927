#pragma once
// SessionOptions from the arguments _hmc.SessionHandle takes, and user seconds as milliseconds.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "hmc/session.hpp"

namespace hmc::python {

using Seconds = std::optional<double>;

// "Wait without limit" as a deadline far from any overflow: the steady clock counts nanoseconds
// from boot (~292 years), and callers add a little slack to a timeout.
constexpr std::chrono::milliseconds kForever = std::chrono::hours(24 * 365 * 100);

// RC QPs per RDMA peer (SessionOptions::num_chs): the verbs bootstrap message carries at most 64.
// Exported as _hmc.MAX_NUM_CHS, the bound hmc.Session checks num_chs against.
constexpr std::size_t kMaxNumChs = 64;

// User seconds -> milliseconds: NaN and negatives refused (naming the argument), inf = kForever.
std::chrono::milliseconds to_ms(double seconds, const char* name);
std::chrono::milliseconds to_ms(Seconds seconds, std::chrono::milliseconds fallback, const char* name);

// The keyword arguments of _hmc.SessionHandle(...); unset optionals keep SessionOptions' defaults.
struct SessionArgs {
  std::size_t buffer_size = 0;
  int mem_type = 0;
  int device_id = 0;
  std::string local_ip;
  std::string progress_mode;
  std::string progress_thread;
  std::string ucx_tls;
  std::string ucx_net_devices;
  double timeout_s = 0;
  std::string uds_dir;
  std::optional<std::string> auth_key;
  bool authenticate = true;
  std::optional<double> heartbeat_interval_s;
  std::optional<std::uint32_t> heartbeat_misses;
  std::optional<std::string> tls_cert;
  std::optional<std::string> tls_key;
  std::optional<std::string> tls_ca;
  std::size_t num_chs = 1;
  bool shared_memory = true;
  std::uint16_t metrics_port = 0;
  std::string metrics_host;
};

SessionOptions session_options(SessionArgs args);

}  // namespace hmc::python
