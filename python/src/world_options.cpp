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
                                              "store_timeout", "lease_ttl",    "max_inflight",    "store_tls"};
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
  if (d.contains("store_tls")) o.store.tls = tls_options(d["store_tls"]);
  return o;
}

TlsOptions tls_options(const py::handle& h) {
  TlsOptions t;
  if (h.is_none()) return t;
  if (!py::isinstance<py::dict>(h))
    throw InvalidArgumentError("store_tls must be a dict (cert, key or key_pem, key_password, ca, crl) or None");
  const auto text = [](const py::handle& v, const std::string& name) {
    if (py::isinstance<py::bytes>(v)) return v.cast<std::string>();
    if (!py::isinstance<py::str>(v)) throw InvalidArgumentError("store_tls['" + name + "'] must be a str");
    return v.cast<std::string>();
  };
  const auto paths = [&](const py::handle& v, const std::string& name) {
    std::vector<std::string> out;
    if (py::isinstance<py::str>(v)) {
      out.push_back(v.cast<std::string>());
    } else if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
      for (auto item : v) out.push_back(text(item, name));
    } else {
      throw InvalidArgumentError("store_tls['" + name + "'] must be a path or a list of paths");
    }
    return out;
  };
  for (auto item : h.cast<py::dict>()) {
    const std::string k = py::str(item.first);
    if (k == "cert") t.cert = text(item.second, k);
    else if (k == "key") t.key = text(item.second, k);
    else if (k == "key_pem") t.key_pem = text(item.second, k);
    else if (k == "key_password") t.key_password = text(item.second, k);
    else if (k == "ca") t.ca = paths(item.second, k);
    else if (k == "crl") t.crl = paths(item.second, k);
    else throw InvalidArgumentError("unknown store_tls key '" + k + "' (cert, key, key_pem, key_password, ca, crl)");
  }
  return t;
}

StoreOptions store_options(const py::dict& d) {
  WorldOptions w = world_options(d);
  return w.store;
}

}  // namespace hmc::python
