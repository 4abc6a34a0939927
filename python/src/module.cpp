// The _hmc extension: a thin binding of hmc::Session for the `hmc` Python package. The Python
// layer (python/hmc/) adds the reference API, asyncio and payload conversions.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <functional>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "buffer_view.hpp"
#include "completion_queue.hpp"
#include "hmc/error.hpp"
#include "hmc/memory.hpp"
#include "hmc/session.hpp"
#include "op_state.hpp"

namespace py = pybind11;
using namespace std::chrono_literals;

namespace hmc::python {
namespace {

using Seconds = std::optional<double>;

std::chrono::milliseconds to_ms(Seconds s, std::chrono::milliseconds fallback) {
  if (!s) return fallback;
  if (*s < 0) throw InvalidArgumentError("timeout must be >= 0 seconds (None waits with the session timeout)");
  return std::chrono::milliseconds(static_cast<long long>(*s * 1000.0));
}

// One operation as Python sees it. `keep` holds Python objects the transfer reads or writes.
class Op {
 public:
  Op(std::shared_ptr<OpState> state, py::object keep) : state_(std::move(state)), keep_(std::move(keep)) {}
  std::uint64_t id() const { return state_->id(); }
  bool done() const { return state_->done(); }
  bool wait(Seconds timeout) {
    std::optional<std::chrono::duration<double>> t;
    if (timeout) t = std::chrono::duration<double>(*timeout);
    py::gil_scoped_release release;
    return state_->wait(t);
  }
  // None, an int (tag), or bytes; raises the operation's error.
  py::object result() const {
    if (!state_->done()) throw InvalidArgumentError("result() before the operation completed: wait() first");
    const auto msg = state_->result();
    if (!msg) return py::none();
    if (msg->kind() == CtrlKind::tag) return py::int_(msg->tag());
    const auto b = msg->bytes();
    return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
  }
  // Withdraws a waiting ctrl_recv (no-op for other operations, which UCX cannot cancel).
  void cancel() {
    if (cancel_) cancel_();
  }
  void set_cancel(std::function<void()> f) { cancel_ = std::move(f); }
  const std::shared_ptr<OpState>& state() const { return state_; }
  py::object& keep() { return keep_; }

 private:
  std::shared_ptr<OpState> state_;
  py::object keep_;
  std::function<void()> cancel_;
};

// User memory registered for zero-copy transfers; holds the Python buffer until unregistered.
class Registered {
 public:
  Registered(Session& s, py::object obj, MemoryType type, std::uintptr_t device_ptr, std::size_t nbytes)
      : obj_(std::move(obj)) {
    if (device_ptr != 0) {
      memory_ = s.register_memory(reinterpret_cast<void*>(device_ptr), nbytes, type);
    } else {
      view_ = std::make_unique<BufferView>(obj_, /*writable=*/false, "register");
      memory_ = s.register_memory(view_->data(), view_->size(), type);
    }
  }
  std::size_t size() const { return memory_.size(); }
  const RegisteredMemory& memory() const { return memory_; }
  void release() {
    memory_ = RegisteredMemory{};
    view_.reset();
    obj_ = py::none();
  }

 private:
  py::object obj_;
  std::unique_ptr<BufferView> view_;
  RegisteredMemory memory_;
};

class Core {
 public:
  Core(std::size_t buffer_size, int mem_type, int device_id, std::string local_ip, const std::string& progress_mode,
       std::string ucx_tls, std::string ucx_net_devices, double timeout_s, std::string uds_dir) {
    SessionOptions o;
    o.buffer_size = buffer_size;
    o.mem_type = static_cast<MemoryType>(mem_type);
    o.device_id = device_id;
    if (!local_ip.empty()) o.local_ip = std::move(local_ip);
    const auto mode = runtime::parse_progress_mode(progress_mode);
    if (!mode) throw InvalidArgumentError("progress_mode must be 'event', 'poll' or 'hybrid'");
    o.progress_mode = *mode;
    o.ucx_tls = std::move(ucx_tls);
    o.ucx_net_devices = std::move(ucx_net_devices);
    if (timeout_s <= 0) throw InvalidArgumentError("timeout must be > 0 seconds");
    o.timeout = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000.0));
    if (!uds_dir.empty()) o.ctrl.uds_dir = std::move(uds_dir);
    py::gil_scoped_release release;
    session_ = std::make_unique<Session>(std::move(o));
  }

  Session& s() {
    if (!session_) throw ClosedError("the session is closed");
    return *session_;
  }

  int completion_fd() const { return queue_->fd(); }

  // Ids of notify=True operations completed since the last drain; also frees finished keep-alives.
  std::vector<std::uint64_t> drain() {
    collect_graveyard();
    return queue_->drain();
  }

  // An operation whose Op was dropped while running keeps its Python objects here until done.
  void bury(Op& op) {
    if (!op.done() && !op.keep().is_none()) graveyard_.emplace_back(op.state(), std::move(op.keep()));
  }

  template <class Start>
  Op submit(bool notify, py::object keep, Start start) {
    auto state = std::make_shared<OpState>(next_id_++, notify ? queue_ : nullptr);
    start(state);
    collect_graveyard();
    return Op(std::move(state), std::move(keep));
  }

  Op rma(bool is_put, std::uint32_t rank, std::size_t local, std::size_t remote, std::size_t n, bool notify) {
    return submit(notify, py::none(), [&](const std::shared_ptr<OpState>& st) {
      auto cb = [st](std::exception_ptr e) { st->complete(std::move(e)); };
      is_put ? s().async_put(rank, local, remote, n, cb) : s().async_get(rank, local, remote, n, cb);
    });
  }

  Op batch(bool is_put, std::uint32_t rank, const std::vector<std::tuple<std::size_t, std::size_t, std::size_t>>& segs,
           bool notify) {
    std::vector<Segment> v;
    v.reserve(segs.size());
    for (const auto& [l, r, n] : segs) v.push_back(Segment{l, r, n});
    return submit(notify, py::none(), [&](const std::shared_ptr<OpState>& st) {
      auto cb = [st](std::exception_ptr e) { st->complete(std::move(e)); };
      is_put ? s().async_put_batch(rank, std::move(v), cb) : s().async_get_batch(rank, std::move(v), cb);
    });
  }

  Op pipeline(bool is_put, std::uint32_t rank, std::size_t local, std::size_t remote, std::size_t n, std::size_t chunk,
              std::size_t window, bool notify) {
    return submit(notify, py::none(), [&](const std::shared_ptr<OpState>& st) {
      auto cb = [st](std::exception_ptr e) { st->complete(std::move(e)); };
      is_put ? s().async_put_pipeline(rank, local, remote, n, chunk, window, cb)
             : s().async_get_pipeline(rank, local, remote, n, chunk, window, cb);
    });
  }

  Op registered(bool is_put, py::object reg_obj, std::size_t off, std::uint32_t rank, std::size_t remote,
                std::size_t n, bool notify) {
    auto& reg = reg_obj.cast<Registered&>();
    return submit(notify, reg_obj, [&](const std::shared_ptr<OpState>& st) {
      auto cb = [st](std::exception_ptr e) { st->complete(std::move(e)); };
      is_put ? s().async_put_from(reg.memory(), off, rank, remote, n, cb)
             : s().async_get_into(reg.memory(), off, rank, remote, n, cb);
    });
  }

  Op ctrl_send(std::uint32_t rank, py::object value, bool notify) {
    CtrlMessage m;
    if (py::isinstance<py::int_>(value)) {
      const auto tag = value.cast<py::int_>();
      if (tag < py::int_(0)) throw InvalidArgumentError("ctrl_send: a tag must be an int in [0, 2**64)");
      m = CtrlMessage::from_tag(value.cast<std::uint64_t>());
    } else {
      BufferView v(value, false, "ctrl_send");
      m = CtrlMessage::from_bytes({static_cast<const std::byte*>(v.data()), v.size()});
    }
    return submit(notify, py::none(), [&](const std::shared_ptr<OpState>& st) {
      s().async_ctrl_send(rank, std::move(m), [st](std::exception_ptr e) { st->complete(std::move(e)); });
    });
  }

  Op ctrl_recv(std::uint32_t rank, Seconds timeout, bool notify) {
    const auto t = to_ms(timeout, s().options().timeout);
    auto signal = std::make_shared<runtime::asio::cancellation_signal>();
    Op op = submit(notify, py::none(), [&](const std::shared_ptr<OpState>& st) {
      s().async_ctrl_recv(rank, t,
                          runtime::asio::bind_cancellation_slot(
                              signal->slot(), [st, signal](std::exception_ptr e, CtrlMessage m) {
                                st->complete(e, e ? std::nullopt : std::optional<CtrlMessage>(std::move(m)));
                              }));
    });
    // Cancellation slots are not thread-safe: emit on the session's loop, where the receive waits.
    op.set_cancel([ex = s().executor(), signal] {
      runtime::asio::post(ex, [signal] { signal->emit(runtime::asio::cancellation_type::terminal); });
    });
    return op;
  }

  std::size_t write(py::handle obj, std::size_t offset) {
    BufferView v(obj, false, "buffer put");
    py::gil_scoped_release release;
    s().buffer().write_from_cpu(v.data(), v.size(), offset);
    return v.size();
  }

  std::size_t read_into(py::handle obj, std::optional<std::size_t> nbytes, std::size_t offset) {
    BufferView v(obj, true, "buffer get_into");
    const std::size_t n = nbytes.value_or(v.size());
    if (n > v.size())
      throw InvalidArgumentError("get_into: nbytes " + std::to_string(n) + " exceeds the destination's " +
                                 std::to_string(v.size()) + " bytes");
    py::gil_scoped_release release;
    s().buffer().read_to_cpu(v.data(), n, offset);
    return n;
  }

  py::bytes read_bytes(std::size_t offset, std::size_t n) {
    s().buffer().check_range(offset, n);
    std::string out(n, '\0');
    {
      py::gil_scoped_release release;
      s().buffer().read_to_cpu(out.data(), n, offset);
    }
    return py::bytes(out);
  }

  // Device memory (e.g. a CUDA tensor's data_ptr) to/from the buffer.
  void device_copy(bool into_buffer, std::uintptr_t ptr, std::size_t n, std::size_t offset, int mem_type,
                   int device_id) {
    auto gpu = Memory::create(static_cast<MemoryType>(mem_type), device_id);
    py::gil_scoped_release release;
    if (into_buffer) {
      s().buffer().write_from_gpu(reinterpret_cast<const void*>(ptr), n, offset, gpu.get());
    } else {
      s().buffer().read_to_gpu(reinterpret_cast<void*>(ptr), n, offset, gpu.get());
    }
  }

  void close() {
    if (!session_) return;
    {
      py::gil_scoped_release release;
      session_->close();
      session_.reset();
    }
    graveyard_.clear();
  }

 private:
  void collect_graveyard() {
    std::erase_if(graveyard_, [](const auto& entry) { return entry.first->done(); });
  }

  std::unique_ptr<Session> session_;
  std::shared_ptr<CompletionQueue> queue_ = std::make_shared<CompletionQueue>();
  std::atomic<std::uint64_t> next_id_{1};
  std::vector<std::pair<std::shared_ptr<OpState>, py::object>> graveyard_;
};

// The one place C++ errors become Python exceptions: hmc._errors maps each status to its class.
void translate(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const Error& e) {
    static py::object by_status = py::module_::import("hmc._errors").attr("by_status");
    py::object cls = by_status(static_cast<int>(e.status()));
    PyErr_SetString(cls.ptr(), e.what());
  }
}

}  // namespace
}  // namespace hmc::python

PYBIND11_MODULE(_hmc, m) {
  using namespace hmc::python;
  using hmc::python::Core;
  m.doc() = "HMC core bindings; use the `hmc` package";
  py::register_exception_translator(&translate);

  py::class_<Op>(m, "Op")
      .def_property_readonly("id", &Op::id)
      .def("done", &Op::done)
      .def("wait", &Op::wait, py::arg("timeout") = py::none())
      .def("result", &Op::result)
      .def("cancel", &Op::cancel);

  py::class_<Registered>(m, "Registered")
      .def_property_readonly("nbytes", &Registered::size)
      .def("release", &Registered::release);

  py::class_<Core>(m, "Core")
      .def(py::init<std::size_t, int, int, std::string, const std::string&, std::string, std::string, double,
                    std::string>(),
           py::arg("buffer_size"), py::arg("mem_type"), py::arg("device_id"), py::arg("local_ip"),
           py::arg("progress_mode"), py::arg("ucx_tls"), py::arg("ucx_net_devices"), py::arg("timeout"),
           py::arg("uds_dir"))
      .def("init_server",
           [](Core& c, const std::string& ip, std::uint16_t ucx_port, std::uint16_t rdma_port, std::uint16_t ctrl_port,
              std::uint32_t self_id, const std::string& uds_dir) {
             auto& s = c.s();
             py::gil_scoped_release release;
             s.init_server(ip, ucx_port, rdma_port, ctrl_port, self_id, uds_dir);
           })
      .def("connect",
           [](Core& c, std::uint32_t peer_id, std::uint32_t self_id, const std::string& ip, std::uint16_t data_port,
              std::uint16_t ctrl_port, int conn) {
             auto& s = c.s();
             py::gil_scoped_release release;
             return s.connect(peer_id, self_id, ip, data_port, ctrl_port, static_cast<hmc::ConnType>(conn));
           })
      .def("wait_peer",
           [](Core& c, std::uint32_t rank, Seconds timeout) {
             auto& s = c.s();
             const auto t = to_ms(timeout, s.options().timeout);
             py::gil_scoped_release release;
             s.wait_peer(rank, t);
           })
      .def("ctrl_port", [](Core& c) { return c.s().ctrl_port(); })
      .def("peers", [](Core& c) { return c.s().peers(); })
      .def("ranks_at", [](Core& c, const std::string& ip) { return c.s().ranks_at(ip); })
      .def("rank_of", [](Core& c, const std::string& ip, std::uint16_t port) { return c.s().rank_of(ip, port); })
      .def("transports", [](Core& c, std::uint32_t rank) { return c.s().transports(rank); })
      .def("buffer_size", [](Core& c) { return c.s().buffer().size(); })
      .def("timeout", [](Core& c) { return static_cast<double>(c.s().options().timeout.count()) / 1000.0; })
      .def("write", &Core::write, py::arg("obj"), py::arg("offset"))
      .def("read_into", &Core::read_into, py::arg("obj"), py::arg("nbytes"), py::arg("offset"))
      .def("read_bytes", &Core::read_bytes)
      .def("copy_within",
           [](Core& c, std::size_t dst, std::size_t src, std::size_t n) { c.s().buffer().copy_within(dst, src, n); })
      .def("device_copy", &Core::device_copy)
      .def("rma", &Core::rma)
      .def("batch", &Core::batch)
      .def("pipeline", &Core::pipeline)
      .def("registered_rma", &Core::registered)
      .def("register",
           [](Core& c, py::object obj, int mem_type, std::uintptr_t device_ptr, std::size_t nbytes) {
             return std::make_unique<Registered>(c.s(), std::move(obj), static_cast<hmc::MemoryType>(mem_type),
                                                 device_ptr, nbytes);
           })
      .def("ctrl_send", &Core::ctrl_send)
      .def("ctrl_recv", &Core::ctrl_recv)
      .def("completion_fd", &Core::completion_fd)
      .def("drain", &Core::drain)
      .def("bury", &Core::bury)
      .def("disconnect", [](Core& c, std::uint32_t rank) { c.s().disconnect(rank); })
      .def("close", &Core::close);

  void bind_world(py::module_&); bind_world(m);  // the world layer: python/src/world_bindings.cpp
  m.def("memory_available", [](int type, int device_id) {
    std::string why;
    const bool ok = hmc::Memory::available(static_cast<hmc::MemoryType>(type), device_id, &why);
    return py::make_tuple(ok, why);
  });
}
