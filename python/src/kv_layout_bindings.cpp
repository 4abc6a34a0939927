// hmc::KvLayout as _hmc.KvLayout: regions in, the wire form out and back.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstddef>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.hpp"
#include "hmc/error.hpp"
#include "hmc/kv_layout.hpp"

namespace py = pybind11;

namespace hmc::python {

namespace {
// A region as Python passes it: (offset, block_bytes, block_count) or with a fourth, the stride.
KvRegion region_of(const py::handle& item, std::size_t i) {
  const auto t = py::reinterpret_borrow<py::sequence>(item);
  const std::size_t n = t.size();
  if (n != 3 && n != 4)
    throw InvalidArgumentError("regions[" + std::to_string(i) +
                               "] must be (offset, block_bytes, block_count[, stride]), not " + std::to_string(n) +
                               " values");
  std::size_t v[4] = {0, 0, 0, 0};
  for (std::size_t j = 0; j < n; ++j) {
    const py::handle x = t[j];
    if (!py::isinstance<py::int_>(x) || py::isinstance<py::bool_>(x) || x.cast<py::int_>() < py::int_(0))
      throw InvalidArgumentError("regions[" + std::to_string(i) + "] must hold integers >= 0, not " +
                                 std::string(py::repr(t)));
    v[j] = x.cast<std::size_t>();
  }
  return KvRegion{v[0], v[1], v[2], v[3]};
}
}  // namespace

void bind_kv_layout(py::module_& m) {
  py::class_<KvLayout>(m, "KvLayout")
      .def(py::init([](const py::sequence& regions) {
             std::vector<KvRegion> v;
             v.reserve(regions.size());
             for (std::size_t i = 0; i < regions.size(); ++i) {
               const py::handle item = regions[i];
               if (!py::isinstance<py::sequence>(item) || py::isinstance<py::str>(item))
                 throw InvalidArgumentError("regions[" + std::to_string(i) +
                                            "] must be (offset, block_bytes, block_count[, stride])");
               v.push_back(region_of(item, i));
             }
             return KvLayout(std::move(v));
           }),
           py::arg("regions"))
      .def_property_readonly("regions",
                             [](const KvLayout& l) {
                               std::vector<std::tuple<std::size_t, std::size_t, std::size_t, std::size_t>> out;
                               for (const KvRegion& g : l.regions())
                                 out.emplace_back(g.offset, g.block_bytes, g.block_count, g.stride);
                               return out;
                             })
      .def_property_readonly("end", &KvLayout::end)
      .def("to_bytes",
           [](const KvLayout& l) {
             const std::vector<std::byte> b = l.to_bytes();
             return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
           })
      .def_static("from_bytes",
                  [](const py::bytes& b) {
                    const std::string s = b;
                    return KvLayout::from_bytes(std::span(reinterpret_cast<const std::byte*>(s.data()), s.size()));
                  })
      .def("__eq__", [](const KvLayout& a, const KvLayout& b) { return a == b; })
      .def("__repr__", [](const KvLayout& l) {
        std::string s = "KvLayout([";
        for (std::size_t i = 0; i < l.regions().size(); ++i) {
          const KvRegion& g = l.regions()[i];
          s += (i != 0 ? ", (" : "(") + std::to_string(g.offset) + ", " + std::to_string(g.block_bytes) + ", " +
               std::to_string(g.block_count) + ", " + std::to_string(g.stride) + ")";
        }
        return s + "])";
      });
}

}  // namespace hmc::python
