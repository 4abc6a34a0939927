#include "asyncio_driver.hpp"

namespace hmc::python {

void AsyncioDriver::set_hook(py::object soon) {
  soon_ = std::move(soon);
  selector_thread_ = std::this_thread::get_id();
}

void AsyncioDriver::poll_here(Session& s, const std::function<bool()>& stop) {
  if (!on_selector_thread()) {
    s.progress(stop);
    return;
  }
  bool again = false;
  s.progress(stop, again);
  soon_wanted_ = soon_wanted_ || again;
}

void AsyncioDriver::ask_soon() {
  if (!soon_wanted_) return;
  soon_wanted_ = false;
  if (soon_due_ || soon_.is_none()) return;
  soon_due_ = true;
  soon_();
}

}  // namespace hmc::python
