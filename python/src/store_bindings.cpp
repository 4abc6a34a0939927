// _hmc bindings of the store (hmc/store.py adds the Python side): its client and its server.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "buffer_view.hpp"
#include "hmc/error.hpp"
#include "hmc/store/store.hpp"
#include "hmc/store/store_server.hpp"
#include "world_options.hpp"

namespace py = pybind11;

namespace hmc::python {
namespace {

class PyStore {
 public:
  PyStore(const std::string& url, const py::dict& options) {
    StoreOptions o = store_options(options);
    py::gil_scoped_release release;
    store_ = std::make_unique<Store>(url, o);
  }
  Store& s() {
    if (!store_) throw ClosedError("the store is closed");
    return *store_;
  }
  std::chrono::milliseconds wait_of(Seconds t) {
    const auto ms = to_ms(t);
    return ms.count() == 0 ? s().options().timeout : ms;
  }
  void close() {
    if (!store_) return;
    py::gil_scoped_release release;
    store_.reset();
  }

 private:
  std::unique_ptr<Store> store_;
};

std::string as_string(py::handle v, const char* what) {
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  BufferView view(v, false, what);
  return std::string(static_cast<const char*>(view.data()), view.size());
}

}  // namespace

void bind_store(py::module_& m) {
  py::class_<PyStore>(m, "Store")
      .def(py::init<const std::string&, const py::dict&>())
      .def_property_readonly("url", [](PyStore& s) { return s.s().url(); })
      .def_property_readonly("job_id", [](PyStore& s) { return s.s().job_id(); })
      .def("set",
           [](PyStore& s, const std::string& key, py::handle value) {
             const std::string v = as_string(value, "store value");
             auto& st = s.s();
             py::gil_scoped_release release;
             st.set(key, v);
           })
      .def("get",
           [](PyStore& s, const std::string& key, Seconds t) {
             auto& st = s.s();
             const auto ms = s.wait_of(t);
             std::string v;
             {
               py::gil_scoped_release release;
               v = st.get(key, ms);
             }
             return py::bytes(v);
           })
      .def("wait",
           [](PyStore& s, const std::vector<std::string>& keys, Seconds t) {
             auto& st = s.s();
             const auto ms = s.wait_of(t);
             py::gil_scoped_release release;
             st.wait(keys, ms);
           })
      .def("add",
           [](PyStore& s, const std::string& key, std::int64_t delta) {
             auto& st = s.s();
             py::gil_scoped_release release;
             return st.add(key, delta);
           })
      .def("compare_set",
           [](PyStore& s, const std::string& key, py::handle expected, py::handle desired) {
             const std::string e = as_string(expected, "expected value"), d = as_string(desired, "desired value");
             auto& st = s.s();
             std::string v;
             {
               py::gil_scoped_release release;
               v = st.compare_set(key, e, d);
             }
             return py::bytes(v);
           })
      .def("delete",
           [](PyStore& s, const std::string& key) {
             auto& st = s.s();
             py::gil_scoped_release release;
             return st.erase(key);
           })
      .def("check",
           [](PyStore& s, const std::vector<std::string>& keys) {
             auto& st = s.s();
             py::gil_scoped_release release;
             return st.check(keys);
           })
      .def("local_address", [](PyStore& s) { return s.s().local_address(); })
      .def("close", &PyStore::close);

  py::class_<StoreServer>(m, "StoreServer")
      .def(py::init(
               [](const std::string& auth_key, bool authenticate, std::size_t max_connections, const py::object& tls) {
                 StoreServerOptions o;
                 o.auth_key = auth_key;
                 o.authenticate = authenticate;
                 o.max_connections = max_connections;
                 o.tls = tls_options(tls);
                 return std::make_unique<StoreServer>(o);
               }),
           py::arg("auth_key") = "", py::arg("authenticate") = true, py::arg("max_connections") = 4096,
           py::arg("tls") = py::none())
      .def("listen",
           [](StoreServer& s, const std::string& host, std::uint16_t port) {
             py::gil_scoped_release release;
             return s.listen(host, port);
           })
      .def("connections", &StoreServer::connections)
      .def("keys", &StoreServer::keys)
      .def("close", [](StoreServer& s) {
        py::gil_scoped_release release;
        s.close();
      });
}

}  // namespace hmc::python
