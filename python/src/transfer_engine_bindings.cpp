// _hmc binding of the TransferEngine (memfabric's transfer API; hmc/mf.py adds the Python side):
// batches of writes and reads by address, completed like the World's operations.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "hmc/world/transfer_engine.hpp"
#include "world_op.hpp"
#include "world_options.hpp"

namespace py = pybind11;

namespace hmc::python {
namespace {

class PyEngine {
 public:
  PyEngine(const std::string& url, const std::string& id, const py::dict& options) {
    WorldOptions w = world_options(options);
    TransferEngineOptions o;
    o.session = w.session;
    o.store = w.store;
    o.local_ip = w.local_ip;
    o.timeout = w.timeout;
    py::gil_scoped_release release;
    engine_ = std::make_unique<TransferEngine>(url, id, std::move(o));
  }
  TransferEngine& e() {
    if (!engine_) throw ClosedError("the transfer engine is closed");
    return *engine_;
  }
  // The local side is an address (memfabric passes pointers as ints); the caller keeps it valid.
  std::shared_ptr<WorldOp> submit(bool is_write, const std::string& peer, const std::vector<std::uintptr_t>& local,
                                  const std::vector<std::uint64_t>& remote, const std::vector<std::size_t>& lengths,
                                  bool notify) {
    if (local.size() != remote.size() || local.size() != lengths.size())
      throw InvalidArgumentError("buffers, peer addresses and lengths must have the same length");
    std::vector<TransferPiece> pieces;
    for (std::size_t i = 0; i < local.size(); ++i)
      pieces.push_back(TransferPiece{reinterpret_cast<void*>(local[i]), remote[i], lengths[i]});
    auto o = std::make_shared<WorldOp>(next_id_++, notify ? queue_ : nullptr);
    auto done = [o](std::exception_ptr err) { o->complete(std::move(err), {}); };
    if (is_write) {
      e().async_write_batch(peer, std::move(pieces), done);
    } else {
      if (pieces.size() != 1) throw InvalidArgumentError("a read takes one buffer");
      e().async_read(peer, pieces[0].local, pieces[0].peer_address, pieces[0].length, done);
    }
    return o;
  }
  int completion_fd() const { return queue_->fd(); }
  std::vector<std::uint64_t> drain() { return queue_->drain(); }
  void close() {
    if (!engine_) return;
    py::gil_scoped_release release;
    engine_.reset();
  }

 private:
  std::unique_ptr<TransferEngine> engine_;
  std::shared_ptr<CompletionQueue> queue_ = std::make_shared<CompletionQueue>();
  std::atomic<std::uint64_t> next_id_{1};
};

}  // namespace

void bind_transfer_engine(py::module_& m) {
  py::class_<PyEngine>(m, "TransferEngine")
      .def(py::init<const std::string&, const std::string&, const py::dict&>())
      .def_property_readonly("rank", [](PyEngine& e) { return e.e().rank(); })
      .def("rpc_port", [](PyEngine& e) { return e.e().rpc_port(); })
      .def("register_memory",
           [](PyEngine& e, std::uintptr_t address, std::size_t length) {
             auto& engine = e.e();
             py::gil_scoped_release release;
             engine.register_memory(reinterpret_cast<void*>(address), length);
           })
      .def("unregister_memory",
           [](PyEngine& e, std::uintptr_t address) {
             auto& engine = e.e();
             py::gil_scoped_release release;
             engine.unregister_memory(reinterpret_cast<void*>(address));
           })
      .def("submit", &PyEngine::submit)
      .def("completion_fd", &PyEngine::completion_fd)
      .def("drain", &PyEngine::drain)
      .def("close", &PyEngine::close);
}

}  // namespace hmc::python
