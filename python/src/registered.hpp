#pragma once
// _hmc.Registered: Python's handle on a RegHolder; release() lets go of it before the object does.
#include <cstddef>
#include <memory>
#include <utility>

#include "hmc/error.hpp"
#include "reg_holder.hpp"

namespace hmc::python {

class Registered {
 public:
  explicit Registered(std::shared_ptr<RegHolder> holder) : holder_(std::move(holder)) {}
  std::size_t size() const { return held().memory.size(); }
  // New operations refuse it; operations in flight keep it until they are done.
  void release() { holder_.reset(); }
  const std::shared_ptr<RegHolder>& holder() const {
    held();
    return holder_;
  }

 private:
  const RegHolder& held() const {
    if (!holder_) throw InvalidArgumentError("the registered buffer was released");
    return *holder_;
  }
  std::shared_ptr<RegHolder> holder_;
};

}  // namespace hmc::python
