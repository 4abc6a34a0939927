#pragma once
// User memory registered for zero-copy transfers. Operations using it hold this too, so the
// registration and the Python buffer live until the last of them is done. Destroyed with the GIL.
#include <pybind11/pybind11.h>

#include <memory>
#include <mutex>
#include <utility>

#include "buffer_view.hpp"
#include "hmc/registered_memory.hpp"
#include "session_lifetime.hpp"

namespace hmc::python {

namespace py = pybind11;

class RegHolder {
 public:
  RegHolder(std::shared_ptr<SessionLifetime> lifetime, py::object obj)
      : lifetime_(std::move(lifetime)), obj_(std::move(obj)) {}
  RegHolder(const RegHolder&) = delete;
  RegHolder& operator=(const RegHolder&) = delete;
  ~RegHolder() {
    if (lifetime_->gate.enter()) {
      memory = RegisteredMemory{};  // unregisters
      lifetime_->gate.leave();
    } else {
      std::lock_guard<std::mutex> lock(lifetime_->mutex);
      if (!lifetime_->session_gone) lifetime_->orphans.push_back(std::move(memory));  // the Session is being closed
    }
  }
  py::object& obj() { return obj_; }

  std::unique_ptr<BufferView> view;
  RegisteredMemory memory;

 private:
  std::shared_ptr<SessionLifetime> lifetime_;
  py::object obj_;
};

}  // namespace hmc::python
