// The runtime's log level, and its log hook feeding a LogQueue while a Python logger is set
// (hmc.set_extern_logger).
#include <memory>
#include <mutex>
#include <string_view>

#include "bindings.hpp"
#include "hmc/runtime/log.hpp"
#include "log_queue.hpp"

namespace py = pybind11;

namespace hmc::python {
namespace {

std::mutex log_mutex;
std::shared_ptr<LogQueue> log_target;

void set_log_queue(std::shared_ptr<LogQueue> queue) {
  std::lock_guard<std::mutex> lock(log_mutex);
  log_target = queue;
  if (!queue) return runtime::set_log_hook({});
  runtime::set_log_hook([queue](runtime::LogLevel level, std::string_view message) { queue->push(level, message); });
}

}  // namespace

void bind_logging(py::module_& m) {
  py::class_<LogQueue, std::shared_ptr<LogQueue>>(m, "LogQueue")
      .def(py::init<>())
      .def("fd", &LogQueue::fd)
      .def("drain", [](LogQueue& q) {
        auto [lines, dropped] = q.drain();
        py::list out;
        for (const auto& [level, text] : lines) {
          py::object msg = py::reinterpret_steal<py::object>(
              PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace"));
          out.append(py::make_tuple(static_cast<int>(level), msg));
        }
        return py::make_tuple(out, dropped);
      });
  m.def("set_log_level", [](int level) { runtime::set_log_level(static_cast<runtime::LogLevel>(level)); });
  m.def("log_level", [] { return static_cast<int>(runtime::log_level()); });
  m.def("set_log_queue", &set_log_queue, py::arg("queue").none(true));
}

}  // namespace hmc::python
