#pragma once
// Python objects an unfinished operation still needs, parked here when its Op is dropped; touched
// only with the GIL held, released once the operation is done.
#include <pybind11/pybind11.h>

#include <memory>
#include <utility>
#include <vector>

#include "op_completion.hpp"

namespace hmc::python {

namespace py = pybind11;

class Graveyard {
 public:
  void bury(std::shared_ptr<OpCompletion> completion, py::object keep, std::shared_ptr<void> pin) {
    entries_.push_back(Entry{std::move(completion), std::move(keep), std::move(pin)});
  }
  void collect() {
    std::erase_if(entries_, [](const Entry& e) { return e.completion->done(); });
  }
  void clear() { entries_.clear(); }

 private:
  struct Entry {
    std::shared_ptr<OpCompletion> completion;
    py::object keep;
    std::shared_ptr<void> pin;
  };
  std::vector<Entry> entries_;
};

}  // namespace hmc::python
