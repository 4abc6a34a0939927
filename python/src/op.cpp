#include "op.hpp"

#include "hmc/error.hpp"
#include "hmc/runtime/deadline.hpp"

namespace hmc::python {

bool Op::wait(Seconds timeout) {
  const std::chrono::milliseconds limit = timeout ? to_ms(*timeout, "timeout") : kForever;
  py::gil_scoped_release release;
  if (lifetime_->caller_driven && !completion_->done() && lifetime_->gate.enter()) {
    struct Leave {
      CallGate& gate;
      ~Leave() { gate.leave(); }
    } leave{lifetime_->gate};
    return lifetime_->session->progress_until([c = completion_.get()] { return c->done(); },
                                              runtime::deadline_after(limit));
  }
  // Own thread; or closing, which drives the loop and fails the operation.
  return completion_->wait(timeout ? std::optional(limit) : std::nullopt);
}

py::object Op::result() const {
  if (!completion_->done()) throw InvalidArgumentError("result() before the operation completed: wait() first");
  const auto msg = completion_->result();
  if (!msg) return py::none();
  if (msg->kind() == CtrlKind::tag) return py::int_(msg->tag());
  const auto b = msg->bytes();
  return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
}

}  // namespace hmc::python
