#pragma once
// Drives a caller-driven session from asyncio's own thread (progress_thread='caller' or 'shared'
// under an event loop): set_hook() installs a `soon()` that schedules a progress() in the loop's
// next turn (call_soon). Submissions made on that thread then start inside a progress() of their
// own (no wakeup-fd signal), and a pass that wants another asks soon() instead of making the
// wakeup fd readable: no eventfd write and read per operation.
#include <pybind11/pybind11.h>

#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <utility>

#include "completion_queue.hpp"
#include "hmc/error.hpp"
#include "hmc/session.hpp"
#include "op_completion.hpp"
#include "session_lifetime.hpp"

namespace hmc::python {

namespace py = pybind11;

class AsyncioDriver {
 public:
  // Called on the event loop's thread, which becomes the selector thread.
  void set_hook(py::object soon) {
    soon_ = std::move(soon);
    selector_thread_ = std::this_thread::get_id();
  }

  bool on_selector_thread() const { return !soon_.is_none() && std::this_thread::get_id() == selector_thread_; }

  // One progress() pass on this thread; a next pass due at once is asked of soon() by ask_soon().
  void poll_here(Session& s, const std::function<bool()>& stop) {
    if (!on_selector_thread()) {
      s.progress(stop);
      return;
    }
    bool again = false;
    s.progress(stop, again);
    soon_wanted_ = soon_wanted_ || again;
  }

  // The pass soon() scheduled is running: only that one ends the wait for it (any other pass
  // clearing it would schedule one more, and each extra pass re-schedules itself while a poller spins).
  void hook_pass_began() { soon_due_ = false; }

  // After the gate is left (no Python code runs inside it): soon(), once until its pass runs.
  void ask_soon() {
    if (!soon_wanted_) return;
    soon_wanted_ = false;
    if (soon_due_ || soon_.is_none()) return;
    soon_due_ = true;
    soon_();
  }

  // On the selector thread, start(session, completion) runs as a handler of this thread's own
  // progress() pass right after: posted without the wakeup-fd signal, and inside the loop the
  // operation starts without a second post. The gate is entered again there: close() may have begun.
  template <class Start>
  void start_here(Session& s, const std::shared_ptr<SessionLifetime>& lifetime, CompletionQueue& queue,
                  const std::shared_ptr<OpCompletion>& completion, Start start) {
    runtime::asio::post(s.executor(), [lifetime, completion, start = std::move(start)]() mutable {
      if (!lifetime->gate.enter())
        return completion->complete(std::make_exception_ptr(ClosedError("the session is closed")));
      struct Leave {
        CallGate& gate;
        ~Leave() { gate.leave(); }
      } leave{lifetime->gate};
      try {
        start(*lifetime->session, completion);
      } catch (...) {
        completion->complete(std::current_exception());
      }
    });
    // Other operations completed in this pass are collected as in progress(), without the
    // completion fd: the next progress() (asked of soon()) returns their ids.
    queue.collect_here();
    struct Stop {
      CompletionQueue& q;
      ~Stop() { q.stop_collecting(); }
    } stop{queue};
    poll_here(s, [c = completion.get()] { return c->done(); });
    soon_wanted_ = soon_wanted_ || queue.has_ids();
  }

 private:
  py::object soon_ = py::none();     // set_hook's soon (touched with the GIL held)
  bool soon_due_ = false;            // soon() was called and its pass has not run yet
  bool soon_wanted_ = false;         // a pass on the selector thread wants another at once
  std::thread::id selector_thread_;  // the thread that called set_hook (asyncio's)
};

}  // namespace hmc::python
