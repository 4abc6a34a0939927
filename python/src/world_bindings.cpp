// _hmc bindings of the World: collectives as operations that complete without the GIL, waited for
// blocking or drained by asyncio through an eventfd, and their zero-copy result buffers. The Python
// package (hmc/world.py) adds the API.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "stats_dict.hpp"
#include "world_op.hpp"
#include "world_options.hpp"

namespace py = pybind11;

namespace hmc::python {
namespace {

class PyWorld {
 public:
  PyWorld(const std::string& url, std::uint32_t size, std::optional<std::uint32_t> rank, const py::dict& options) {
    WorldOptions o = world_options(options);
    py::gil_scoped_release release;
    world_ = std::make_unique<World>(url, size, rank, std::move(o));
  }
  PyWorld(std::uint32_t rank, std::uint32_t size, const py::dict& options) {
    WorldOptions o = world_options(options);
    py::gil_scoped_release release;
    world_ = std::make_unique<World>(rank, size, std::move(o));
  }

  World& w() {
    if (!world_) throw ClosedError("the world is closed");
    return *world_;
  }
  int completion_fd() const { return queue_->fd(); }
  std::vector<std::uint64_t> drain() { return queue_->drain(); }

  std::shared_ptr<WorldOp> op(bool notify) { return std::make_shared<WorldOp>(next_id_++, notify ? queue_ : nullptr); }
  static auto done_fn(const std::shared_ptr<WorldOp>& o) {
    return [o](std::exception_ptr e) { o->complete(std::move(e), {}); };
  }
  static auto bytes_fn(const std::shared_ptr<WorldOp>& o) {
    return [o](std::exception_ptr e, std::vector<std::byte> r) {
      detail::CollectiveResult res;
      res.bytes = std::move(r);
      o->complete(std::move(e), std::move(res));
    };
  }
  // A collective from `in` into `out`, both held by its op until it completes; `start(in, out, done)`.
  template <class Start>
  std::shared_ptr<WorldOp> in_to_out(py::object in, py::object out, bool notify, const char* in_role,
                                     const char* out_role, Start start) {
    auto o = op(notify);
    auto i = o->hold_in(in, in_role);
    auto u = o->hold_out(out, out_role);
    start(i, u, done_fn(o));
    return o;
  }
  static auto blocks_fn(const std::shared_ptr<WorldOp>& o) {
    return [o](std::exception_ptr e, Blocks b) {
      detail::CollectiveResult res;
      res.blocks = std::move(b);
      o->complete(std::move(e), std::move(res));
    };
  }

  std::shared_ptr<WorldOp> barrier(Seconds t, bool notify) {
    auto o = op(notify);
    w().async_barrier(to_ms(t), done_fn(o));
    return o;
  }
  std::shared_ptr<WorldOp> broadcast(py::object data, std::uint32_t root, Seconds t, bool notify) {
    auto o = op(notify);
    std::vector<std::byte> bytes;
    if (!data.is_none()) {
      BufferView v(data, false, "broadcast");
      const auto* p = static_cast<const std::byte*>(v.data());
      bytes.assign(p, p + v.size());
    }
    w().async_broadcast(std::move(bytes), root, to_ms(t), bytes_fn(o));
    return o;
  }
  std::shared_ptr<WorldOp> all_gather(py::object in, py::object out, Seconds t, bool notify) {
    return in_to_out(in, out, notify, "all_gather input", "all_gather output",
                     [&](auto i, auto u, auto done) { w().async_all_gather(i, u, to_ms(t), std::move(done)); });
  }
  std::shared_ptr<WorldOp> all_gather_v(py::object in, Seconds t, bool notify) {
    auto o = op(notify);
    w().async_all_gather_v(o->hold_in(in, "all_gather input"), to_ms(t), blocks_fn(o));
    return o;
  }
  std::shared_ptr<WorldOp> gather(py::object in, std::uint32_t root, Seconds t, bool notify) {
    auto o = op(notify);
    w().async_gather(o->hold_in(in, "gather input"), root, to_ms(t), blocks_fn(o));
    return o;
  }
  std::shared_ptr<WorldOp> scatter(const py::list& blocks, std::uint32_t root, Seconds t, bool notify) {
    auto o = op(notify);
    std::vector<std::span<const std::byte>> spans;
    for (auto b : blocks) spans.push_back(o->hold_in(b, "scatter block"));
    w().async_scatter(std::move(spans), root, to_ms(t), bytes_fn(o));
    return o;
  }
  std::shared_ptr<WorldOp> all_to_all(py::object in, py::object out, Seconds t, bool notify) {
    return in_to_out(in, out, notify, "all_to_all input", "all_to_all output",
                     [&](auto i, auto u, auto done) { w().async_all_to_all(i, u, to_ms(t), std::move(done)); });
  }
  std::shared_ptr<WorldOp> all_to_all_v(const py::list& blocks, Seconds t, bool notify) {
    auto o = op(notify);
    std::vector<std::span<const std::byte>> spans;
    for (auto b : blocks) spans.push_back(o->hold_in(b, "all_to_all block"));
    w().async_all_to_all_v(std::move(spans), to_ms(t), blocks_fn(o));
    return o;
  }
  std::shared_ptr<WorldOp> all_reduce(py::object in, py::object out, int dtype, int reduce_op, Seconds t, bool notify) {
    if (dtype < 0 || dtype > static_cast<int>(DataType::float64)) throw InvalidArgumentError("unknown element type");
    if (reduce_op < 0 || reduce_op > static_cast<int>(ReduceOp::min)) throw InvalidArgumentError("unknown reduction");
    return in_to_out(in, out, notify, "all_reduce input", "all_reduce output", [&](auto i, auto u, auto done) {
      w().async_all_reduce(i, u, static_cast<DataType>(dtype), static_cast<ReduceOp>(reduce_op), to_ms(t),
                           std::move(done));
    });
  }

  // The session under the world, by rank (blocking; the GIL is released while waiting).
  void rma(bool is_put, std::uint32_t peer, std::size_t local, std::size_t remote, std::size_t n) {
    auto& s = w().session();
    py::gil_scoped_release release;
    is_put ? s.put(peer, local, remote, n) : s.get(peer, local, remote, n);
  }
  // (local, remote, n) segments to one peer as one operation, as rma.
  void rma_batch(bool is_put, std::uint32_t peer,
                 const std::vector<std::tuple<std::size_t, std::size_t, std::size_t>>& segments) {
    std::vector<Segment> v;
    v.reserve(segments.size());
    for (const auto& [local, remote, n] : segments) v.push_back(Segment{local, remote, n});
    auto& s = w().session();
    py::gil_scoped_release release;
    is_put ? s.put_batch(peer, std::move(v)) : s.get_batch(peer, std::move(v));
  }
  std::size_t write(py::handle obj, std::size_t offset) {
    BufferView v(obj, false, "buffer write");
    auto& s = w().session();
    py::gil_scoped_release release;
    s.buffer().write_from_cpu(v.data(), v.size(), offset);
    return v.size();
  }
  py::bytes read(std::size_t offset, std::size_t n) {
    auto& s = w().session();
    s.buffer().check_range(offset, n);
    std::string out(n, '\0');
    {
      py::gil_scoped_release release;
      s.buffer().read_to_cpu(out.data(), n, offset);
    }
    return py::bytes(out);
  }

  void close() {
    if (!world_) return;
    py::gil_scoped_release release;
    world_->close();
    world_.reset();
  }

 private:
  std::unique_ptr<World> world_;
  std::shared_ptr<CompletionQueue> queue_ = std::make_shared<CompletionQueue>();
  std::atomic<std::uint64_t> next_id_{1};
};

}  // namespace
}  // namespace hmc::python

// Called from module.cpp's PYBIND11_MODULE (declared in bindings.hpp).
void bind_world(py::module_& m) {
  using namespace hmc;
  using namespace hmc::python;
  py::class_<ByteVector>(m, "ByteVector", py::buffer_protocol())
      .def_buffer([](ByteVector& b) { return bytes_info(b.data); })
      .def("__len__", [](const ByteVector& b) { return b.data.size(); });

  py::class_<PyBlocks>(m, "Blocks", py::buffer_protocol())
      .def_buffer([](PyBlocks& b) { return bytes_info(b.blocks.data); })
      .def_property_readonly("offsets", [](const PyBlocks& b) { return b.blocks.offsets; })
      .def("__len__", [](const PyBlocks& b) { return b.blocks.count(); });

  py::class_<WorldOp, std::shared_ptr<WorldOp>>(m, "WorldOp")
      .def_property_readonly("id", &WorldOp::id)
      .def("done", &WorldOp::done)
      .def("wait", &WorldOp::wait, py::arg("timeout") = py::none())
      .def("result", &WorldOp::result, py::arg("shape"));

  py::class_<PyWorld>(m, "World")
      .def(py::init<const std::string&, std::uint32_t, std::optional<std::uint32_t>, const py::dict&>())
      .def(py::init<std::uint32_t, std::uint32_t, const py::dict&>())
      .def_property_readonly("rank", [](PyWorld& w) { return w.w().rank(); })
      .def_property_readonly("size", [](PyWorld& w) { return w.w().size(); })
      .def("address",
           [](PyWorld& w) {
             const auto a = w.w().address();
             return py::make_tuple(a.ip, a.ctrl_port);
           })
      .def("join",
           [](PyWorld& w, const std::vector<std::pair<std::string, std::uint16_t>>& dir) {
             std::vector<PeerAddress> v;
             for (const auto& [ip, port] : dir) v.push_back(PeerAddress{ip, port});
             auto& world = w.w();
             py::gil_scoped_release release;
             world.join(std::move(v));
           })
      .def("connect",
           [](PyWorld& w, std::uint32_t peer, Seconds t) {
             auto& world = w.w();
             const auto ms = to_ms(t);
             py::gil_scoped_release release;
             world.connect(peer, ms);
           })
      .def("connected", [](PyWorld& w) { return w.w().connected(); })
      .def("resolve", [](PyWorld& w, const std::string& ip,
                         std::optional<std::uint16_t> port) { return w.w().session().resolve_peer(ip, port); })
      .def("transports", [](PyWorld& w, std::uint32_t peer) { return w.w().session().transports(peer); })
      .def("stats", [](PyWorld& w) { return hmc::python::stats_dict(w.w().session().stats()); })
      .def("buffer_size", [](PyWorld& w) { return w.w().session().buffer().size(); })
      .def("completion_fd", &PyWorld::completion_fd)
      .def("drain", &PyWorld::drain)
      .def("barrier", &PyWorld::barrier)
      .def("broadcast", &PyWorld::broadcast)
      .def("all_gather", &PyWorld::all_gather)
      .def("all_gather_v", &PyWorld::all_gather_v)
      .def("gather", &PyWorld::gather)
      .def("scatter", &PyWorld::scatter)
      .def("all_to_all", &PyWorld::all_to_all)
      .def("all_to_all_v", &PyWorld::all_to_all_v)
      .def("all_reduce", &PyWorld::all_reduce)
      .def("rma", &PyWorld::rma)
      .def("rma_batch", &PyWorld::rma_batch)
      .def("write", &PyWorld::write)
      .def("read", &PyWorld::read)
      .def("ctrl_send",
           [](PyWorld& w, std::uint32_t peer, std::uint64_t tag) {
             auto& s = w.w().session();
             py::gil_scoped_release release;
             s.ctrl_send(peer, tag);
           })
      .def("ctrl_recv",
           [](PyWorld& w, std::uint32_t peer, Seconds t) {
             auto& s = w.w().session();
             const auto ms = to_ms(t);
             py::gil_scoped_release release;
             return s.ctrl_recv(peer, ms.count() == 0 ? s.options().timeout : ms);
           })
      .def("close", &PyWorld::close);
}
