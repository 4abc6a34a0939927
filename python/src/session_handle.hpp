#pragma once
// _hmc.SessionHandle: one hmc::Session as the Python package holds it. Every use of the Session
// enters the lifetime's gate (a SessionCall), so close() can refuse new calls, wait for those in
// flight and only then destroy the Session; operations come back as Ops.
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "asyncio_driver.hpp"
#include "completion_queue.hpp"
#include "graveyard.hpp"
#include "hmc/error.hpp"
#include "hmc/session.hpp"
#include "op.hpp"
#include "op_completion.hpp"
#include "options.hpp"
#include "registered.hpp"
#include "session_call.hpp"
#include "session_lifetime.hpp"

namespace hmc::python {

namespace py = pybind11;

class SessionHandle {
 public:
  explicit SessionHandle(SessionOptions options);
  ~SessionHandle() { close(); }
  SessionHandle(const SessionHandle&) = delete;
  SessionHandle& operator=(const SessionHandle&) = delete;

  // Every use of the Session goes through this: ClosedError once close() has begun.
  SessionCall use() {
    if (!lifetime_->gate.enter()) throw ClosedError("the session is closed");
    return SessionCall(lifetime_->gate, session_.get());
  }

  // Calls whose waits release the GIL; f(Session&) runs inside a SessionCall.
  template <class F>
  auto blocking(F f) {
    SessionCall s = use();
    py::gil_scoped_release release;
    return f(*s);
  }

  int completion_fd() const { return queue_->fd(); }

  // ProgressThread::caller: readable while progress() has work.
  int wakeup_fd() { return use()->wakeup_fd(); }

  // Runs the ready handlers and progresses the transport once (never blocks, so the GIL stays held), then
  // returns the ids of notify=True operations completed meanwhile, like drain(): the completions
  // found on this thread are collected here, without the completion fd. `soon`: this is the pass
  // set_soon's hook scheduled (AsyncioDriver::hook_pass_began).
  std::vector<std::uint64_t> progress(bool soon);

  // asyncio on a caller-driven session (called on the event loop's thread): see AsyncioDriver.
  void set_soon(py::object soon) { driver_.set_hook(std::move(soon)); }

  // Ids of notify=True operations completed since the last drain; also frees finished keep-alives.
  std::vector<std::uint64_t> drain() {
    graveyard_->collect();
    return queue_->drain();
  }

  Op rma(bool is_put, std::uint32_t rank, std::size_t local, std::size_t remote, std::size_t n, bool notify);
  // A batch; with a `tag` (puts only), the tag follows it to the peer's ctrl_recv as put_notify's.
  Op batch(bool is_put, std::uint32_t rank, const std::vector<std::tuple<std::size_t, std::size_t, std::size_t>>& segs,
           bool notify, py::object tag);
  // The same for an (N, 3) integer array: read in C++, no Python object per segment.
  Op batch_array(bool is_put, std::uint32_t rank, const py::buffer& segs, bool notify, py::object tag);
  // Blocks by id between two KV layouts (1-D integer arrays of ids); `tag` as for batch.
  // `mem`: None (the session buffer) or a Registered holding the local side's layout.
  Op blocks(bool is_put, std::uint32_t rank, const KvLayout& local, const py::buffer& src_ids, const KvLayout& remote,
            const py::buffer& dst_ids, const py::object& mem, bool notify, py::object tag);
  Op pipeline(bool is_put, std::uint32_t rank, std::size_t local, std::size_t remote, std::size_t n, std::size_t chunk,
              std::size_t window, bool notify);
  Op registered(bool is_put, const Registered& reg, std::size_t off, std::uint32_t rank, std::size_t remote,
                std::size_t n, bool notify);
  Registered register_memory(py::object obj, int mem_type, std::uintptr_t device_ptr, std::size_t nbytes);
  // put, then `tag` to the peer's ctrl_recv once the bytes are there (Session::async_put_notify).
  Op put_notify(std::uint32_t rank, std::size_t local, std::size_t remote, std::size_t n, py::object tag, bool notify);
  Op registered_put_notify(const Registered& reg, std::size_t off, std::uint32_t rank, std::size_t remote,
                           std::size_t n, py::object tag, bool notify);
  Op ctrl_send(std::uint32_t rank, py::object value, bool notify);
  Op ctrl_recv(std::uint32_t rank, Seconds timeout, bool notify);
  Op wait_notify(std::uint32_t rank, std::uint64_t tag, std::uint64_t count, Seconds timeout, bool notify);

  // The fast path of put_remote / get_remote (fast_call.cpp): arguments as Python passed them,
  // used only when each is plain; otherwise nothing is sent and the general path runs.
  bool rma_wait(bool is_put, py::handle peer, py::handle port, py::handle local, py::handle remote, py::handle size);
  py::object rma_start(bool is_put, py::handle peer, py::handle port, py::handle local, py::handle remote,
                       py::handle size);

  std::size_t write(py::handle obj, std::size_t offset);
  std::size_t read_into(py::handle obj, std::optional<std::size_t> nbytes, std::size_t offset);
  py::bytes read_bytes(std::size_t offset, std::size_t n);
  // Memory at a raw address (CPU, or a device pointer such as a CUDA tensor's data_ptr) to/from
  // the buffer. The caller guarantees the address holds n bytes.
  void copy_ptr(bool into_buffer, std::uintptr_t ptr, std::size_t n, std::size_t offset, int mem_type, int device_id);
  void copy_within(std::size_t dst, std::size_t src, std::size_t n);

  // Refuses new calls, wakes the waits in flight (they fail with ClosedError), waits for every
  // call inside the handle to leave, then destroys the Session. A second close() waits for the first.
  void close();

 private:
  Op batch_of(bool is_put, std::uint32_t rank, std::vector<Segment> segs, bool notify, const py::object& tag);
  // `start` is copied into a handler on the selector thread (start_here): it captures by value.
  template <class Start>
  Op submit(bool notify, py::object keep, std::shared_ptr<void> pin, Start start);

  static auto completer(const std::shared_ptr<OpCompletion>& c) {
    return [c](std::exception_ptr e) { c->complete(std::move(e)); };
  }

  std::shared_ptr<SessionLifetime> lifetime_ = std::make_shared<SessionLifetime>();
  std::unique_ptr<Session> session_;
  std::shared_ptr<CompletionQueue> queue_ = std::make_shared<CompletionQueue>();
  std::shared_ptr<Graveyard> graveyard_ = std::make_shared<Graveyard>();
  AsyncioDriver driver_;
};

}  // namespace hmc::python
