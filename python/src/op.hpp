#pragma once
// One operation as Python sees it (_hmc.Op). `keep` (Python objects) and `pin` (a registration)
// stay alive until the transfer is done, even when the Op is dropped first.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "completion_queue.hpp"
#include "graveyard.hpp"
#include "op_completion.hpp"
#include "options.hpp"
#include "session_lifetime.hpp"

namespace hmc::python {

namespace py = pybind11;

class Op {
 public:
  Op(std::shared_ptr<OpCompletion> completion, std::shared_ptr<Graveyard> graveyard, py::object keep,
     std::shared_ptr<void> pin, std::shared_ptr<SessionLifetime> lifetime)
      : completion_(std::move(completion)),
        graveyard_(std::move(graveyard)),
        keep_(std::move(keep)),
        pin_(std::move(pin)),
        lifetime_(std::move(lifetime)) {}
  Op(Op&&) = default;
  Op& operator=(Op&&) = delete;
  Op(const Op&) = delete;
  Op& operator=(const Op&) = delete;
  ~Op() {
    if (completion_ && !completion_->done() && (!keep_.is_none() || pin_))
      graveyard_->bury(completion_, std::move(keep_), std::move(pin_));
  }

  std::uint64_t id() const { return completion_->id(); }
  bool done() const { return completion_->done(); }
  // timeout None: without limit. A caller-driven session is driven by this thread meanwhile
  // (one driver at a time: a second waiting thread sleeps until its operation is done).
  bool wait(Seconds timeout);
  // None, an int (tag), or bytes; raises the operation's error.
  py::object result() const;
  void notify(const std::shared_ptr<CompletionQueue>& queue) { completion_->notify(queue); }
  // Withdraws a waiting ctrl_recv (no-op for other operations, which the transport cannot cancel).
  void cancel() {
    if (cancel_) cancel_();
  }
  void set_cancel(std::function<void()> f) { cancel_ = std::move(f); }

 private:
  std::shared_ptr<OpCompletion> completion_;
  std::shared_ptr<Graveyard> graveyard_;
  py::object keep_;
  std::shared_ptr<void> pin_;
  std::shared_ptr<SessionLifetime> lifetime_;
  std::function<void()> cancel_;
};

}  // namespace hmc::python
