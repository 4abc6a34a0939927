#include "options.hpp"

#include <algorithm>
#include <utility>

#include "hmc/error.hpp"
#include "hmc/runtime/deadline.hpp"

namespace hmc::python {

std::chrono::milliseconds to_ms(double seconds, const char* name) {
  const auto ms = runtime::seconds_to_ms(seconds);
  if (!ms) throw InvalidArgumentError(std::string(name) + " must be a number of seconds >= 0 (inf: no limit)");
  return std::min(*ms, kForever);
}

std::chrono::milliseconds to_ms(Seconds seconds, std::chrono::milliseconds fallback, const char* name) {
  return seconds ? to_ms(*seconds, name) : fallback;
}

// The values arrive checked: hmc.Session (python/hmc/session.py, _args.py) is the one place that
// refuses bad arguments, with errors naming each one and its value.
SessionOptions session_options(SessionArgs a) {
  SessionOptions o;
  o.shared_memory = a.shared_memory;
  o.buffer_size = a.buffer_size;
  o.mem_type = static_cast<MemoryType>(a.mem_type);
  o.device_id = a.device_id;
  if (!a.local_ip.empty()) o.local_ip = std::move(a.local_ip);
  o.progress_mode = runtime::parse_progress_mode(a.progress_mode).value_or(o.progress_mode);
  if (a.progress_thread == "own") {
    o.progress_thread = ProgressThread::own;
  } else if (a.progress_thread == "caller") {
    o.progress_thread = ProgressThread::caller;
  } else {
    o.progress_thread = ProgressThread::shared;
  }
  o.ucx_tls = std::move(a.ucx_tls);
  o.ucx_net_devices = std::move(a.ucx_net_devices);
  o.timeout = to_ms(a.timeout_s, "timeout");
  if (!a.uds_dir.empty()) o.ctrl.uds_dir = std::move(a.uds_dir);
  // Unset ones keep the defaults and their environment variables (HMC_AUTH_KEY, HMC_TLS_*).
  if (a.auth_key) o.auth_key = std::move(*a.auth_key);
  o.authenticate = a.authenticate;
  if (a.heartbeat_interval_s) o.ctrl.heartbeat_interval = to_ms(*a.heartbeat_interval_s, "heartbeat_interval");
  if (a.heartbeat_misses) o.ctrl.heartbeat_misses = *a.heartbeat_misses;
  if (a.tls_cert) o.ctrl.tls_cert = std::move(*a.tls_cert);
  if (a.tls_key) o.ctrl.tls_key = std::move(*a.tls_key);
  if (a.tls_ca) o.ctrl.tls_ca = std::move(*a.tls_ca);
  o.num_chs = a.num_chs;
  o.metrics_port = a.metrics_port;
  if (!a.metrics_host.empty()) o.metrics_host = std::move(a.metrics_host);
  return o;
}

}  // namespace hmc::python
