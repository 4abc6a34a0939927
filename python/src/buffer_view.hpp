#pragma once
// A held Python buffer (PEP 3118) that is C-contiguous; released with the GIL held.
#include <pybind11/pybind11.h>

#include <cstring>
#include <string>

#include "hmc/error.hpp"

namespace hmc::python {

namespace py = pybind11;

class BufferView {
 public:
  // writable: the object is a destination. A non-contiguous or read-only object is an
  // InvalidArgumentError naming what to pass instead.
  BufferView(py::handle obj, bool writable, const char* role) {
    const int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) {
      PyErr_Clear();
      Py_buffer probe;
      const bool is_buffer = PyObject_GetBuffer(obj.ptr(), &probe, PyBUF_SIMPLE | PyBUF_STRIDES) == 0;
      if (is_buffer) PyBuffer_Release(&probe);
      PyErr_Clear();
      std::string type = py::str(py::type::handle_of(obj).attr("__name__"));
      if (!is_buffer && PyObject_CheckBuffer(obj.ptr()) == 0)
        throw InvalidArgumentError(
            std::string(role) + ": a " + type +
            " is not a buffer (pass bytes, bytearray, memoryview, a NumPy array or a CPU tensor)");
      if (writable)
        throw InvalidArgumentError(std::string(role) + ": the " + type +
                                   " must be writable and C-contiguous (np.ascontiguousarray, or a bytearray)");
      throw InvalidArgumentError(std::string(role) + ": the " + type + " must be C-contiguous");
    }
    // Python object pointers are no payload: sending them would leak addresses and crash the peer.
    if (view_.format != nullptr && std::strchr(view_.format, 'O') != nullptr) {
      const std::string format = view_.format;
      PyBuffer_Release(&view_);
      throw InvalidArgumentError(std::string(role) + ": a buffer of Python objects (format '" + format +
                                 "') cannot be sent or received; convert it to a numeric array");
    }
    held_ = true;
  }
  ~BufferView() {
    if (held_) PyBuffer_Release(&view_);
  }
  BufferView(const BufferView&) = delete;
  BufferView& operator=(const BufferView&) = delete;

  void* data() const noexcept { return view_.buf; }
  std::size_t size() const noexcept { return static_cast<std::size_t>(view_.len); }

 private:
  Py_buffer view_{};
  bool held_ = false;
};

}  // namespace hmc::python
