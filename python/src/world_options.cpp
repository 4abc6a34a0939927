#include "world_options.hpp"

#include <set>
#include <string>

#include "hmc/error.hpp"
#include "hmc/runtime/deadline.hpp"
#include "hmc/runtime/progress_mode.hpp"

namespace py = pybind11;

namespace hmc::python {
namespace {
template <class T>
T opt(const py::dict& d, const char* key, T fallback) {
  return d.contains(key) && !d[key].is_none() ? d[key].cast<T>() : fallback;
}
}  // namespace

std::chrono::milliseconds to_ms(Seconds s) {
  if (!s) return std::chrono::milliseconds(0);
  auto ms = runtime::seconds_to_ms(*s);
  if (!ms) throw InvalidArgumentError("timeout must be a number of seconds >= 0 (None: the default)");
  return std::max(*ms, std::chrono::milliseconds(1));
}

WorldOptions world_options(const py::dict& d) {
  static const std::set<std::string> known = {"buffer_size",   "ucx_tls",      "ucx_net_devices", "progress_mode",
                                              "timeout",       "ctrl_uds_dir", "job_id",          "auth_key",
                                              "authenticate",  "start_store",  "local_ip",        "full_mesh",
                                              "store_timeout", "lease_ttl",    "max_inflight"};
  for (auto item : d)
    if (!known.count(item.first.cast<std::string>()))
      throw InvalidArgumentError("unknown world option '" + item.first.cast<std::string>() + "'");
  WorldOptions o;
  o.session.buffer_size = opt<std::size_t>(d, "buffer_size", std::size_t{64} << 20);
  o.session.ucx_tls = opt<std::string>(d, "ucx_tls", "");
  o.session.ucx_net_devices = opt<std::string>(d, "ucx_net_devices", "");
  o.session.max_inflight = opt<std::size_t>(d, "max_inflight", o.session.max_inflight);
  const auto mode = runtime::parse_progress_mode(opt<std::string>(d, "progress_mode", "event"));
  if (!mode) throw InvalidArgumentError("progress_mode must be 'adaptive', 'event' or 'poll'");
  o.session.progress_mode = *mode;
  const auto timeout = to_ms(opt<double>(d, "timeout", 30.0));
  o.session.timeout = timeout;
  o.timeout = timeout;
  o.store.timeout =
      d.contains("store_timeout") && !d["store_timeout"].is_none() ? to_ms(d["store_timeout"].cast<double>()) : timeout;
  o.store.lease_ttl = std::chrono::seconds(opt<long>(d, "lease_ttl", 10));
  if (auto dir = opt<std::string>(d, "ctrl_uds_dir", ""); !dir.empty()) o.session.ctrl.uds_dir = dir;
  o.store.job_id = opt<std::string>(d, "job_id", "");
  o.session.auth_key = opt<std::string>(d, "auth_key", "");  // the store takes the session's (take_session_auth)
  o.session.authenticate = opt<bool>(d, "authenticate", true);
  o.store.auth_key = o.session.auth_key;
  o.store.authenticate = o.session.authenticate;
  if (d.contains("start_store") && !d["start_store"].is_none()) o.start_store = d["start_store"].cast<bool>();
  o.local_ip = opt<std::string>(d, "local_ip", "");
  o.full_mesh = opt<bool>(d, "full_mesh", false);
  return o;
}

StoreOptions store_options(const py::dict& d) {
  WorldOptions w = world_options(d);
  return w.store;
}

}  // namespace hmc::python
