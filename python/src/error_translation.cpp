// hmc::Error to the Python class hmc._errors maps its status to.
#include <exception>

#include "bindings.hpp"
#include "hmc/error.hpp"

namespace py = pybind11;

namespace hmc::python {
namespace {

void translate(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const Error& e) {
    // Never destroyed: a static py::object would be released after the interpreter is gone.
    static auto* by_status = new py::object(py::module_::import("hmc._errors").attr("by_status"));
    py::object cls = (*by_status)(static_cast<int>(e.status()));
    PyErr_SetString(cls.ptr(), e.what());
  }
}

}  // namespace

void register_error_translator() { py::register_exception_translator(&translate); }

}  // namespace hmc::python
