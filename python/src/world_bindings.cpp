// _hmc bindings of the world layer: Store, StoreServer, World (collectives as operations that
// complete without the GIL, waited for blocking or drained by asyncio through an eventfd) and
// zero-copy result buffers. The Python package (hmc/world.py, store.py, mf.py) adds the API.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>

#include "bindings.hpp"
#include "buffer_view.hpp"
#include "completion_queue.hpp"
#include "hmc/error.hpp"
#include "hmc/runtime/deadline.hpp"
#include "hmc/store/store.hpp"
#include "hmc/store/store_server.hpp"
#include "hmc/world/transfer_engine.hpp"
#include "hmc/world/world.hpp"

namespace py = pybind11;

namespace hmc::python {
namespace {

using Seconds = std::optional<double>;

// None: the default (0 means "the world's/store's own timeout" below).
std::chrono::milliseconds to_ms(Seconds s) {
  if (!s) return std::chrono::milliseconds(0);
  auto ms = runtime::seconds_to_ms(*s);
  if (!ms) throw InvalidArgumentError("timeout must be a number of seconds >= 0 (None: the default)");
  return std::max(*ms, std::chrono::milliseconds(1));
}

// Bytes owned by C++ and lent to Python through the buffer protocol (NumPy views them, no copy).
struct ByteVector {
  std::vector<std::byte> data;
};

struct PyBlocks {
  Blocks blocks;
};

py::buffer_info bytes_info(std::vector<std::byte>& v) {
  return py::buffer_info(v.data(), 1, py::format_descriptor<std::uint8_t>::format(), 1, {v.size()}, {1});
}

// One collective submitted from Python: completed on the loop thread (no GIL), waited for with the
// GIL released, or announced to asyncio through the world's completion queue.
class WorldOp {
 public:
  WorldOp(std::uint64_t id, std::shared_ptr<CompletionQueue> queue) : id_(id), queue_(std::move(queue)) {}

  std::uint64_t id() const { return id_; }

  void complete(std::exception_ptr e, detail::CollectiveResult r) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::move(e);
      result_ = std::move(r);
      done_ = true;
    }
    cv_.notify_all();
    if (queue_) queue_->push(id_);
  }

  bool done() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }

  // timeout None: without limit; inf or years saturate (Op::wait's rule), NaN and negatives are refused.
  bool wait(Seconds timeout) {
    std::optional<std::chrono::milliseconds> limit;
    if (timeout) {
      limit = runtime::seconds_to_ms(*timeout);
      if (!limit) throw InvalidArgumentError("timeout must be a number of seconds >= 0 (None: without limit)");
    }
    py::gil_scoped_release release;
    std::unique_lock<std::mutex> lock(mutex_);
    if (!limit) {
      cv_.wait(lock, [&] { return done_; });
      return true;
    }
    return cv_.wait_until(lock, runtime::deadline_after(*limit), [&] { return done_; });
  }

  // None, a ByteVector (broadcast, scatter) or Blocks; raises the collective's error. Releases the
  // Python objects the collective read or wrote.
  py::object result(const char* shape) {
    if (!done()) throw InvalidArgumentError("result() before the collective completed: wait() first");
    views_.clear();
    keep_ = py::none();
    if (error_) std::rethrow_exception(error_);
    const std::string s = shape;
    if (s == "bytes") return py::cast(ByteVector{std::move(result_.bytes)});
    if (s == "blocks") return py::cast(PyBlocks{std::move(result_.blocks)});
    return py::none();
  }

  // Inputs and outputs the collective uses: held until it completes.
  std::span<const std::byte> hold_in(py::handle obj, const char* role) {
    views_.push_back(std::make_unique<BufferView>(obj, false, role));
    return {static_cast<const std::byte*>(views_.back()->data()), views_.back()->size()};
  }
  std::span<std::byte> hold_out(py::handle obj, const char* role) {
    views_.push_back(std::make_unique<BufferView>(obj, true, role));
    return {static_cast<std::byte*>(views_.back()->data()), views_.back()->size()};
  }
  void keep(py::object o) { keep_ = std::move(o); }

 private:
  const std::uint64_t id_;
  const std::shared_ptr<CompletionQueue> queue_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  detail::CollectiveResult result_;
  std::vector<std::unique_ptr<BufferView>> views_;
  py::object keep_ = py::none();
};

template <class T>
T opt(const py::dict& d, const char* key, T fallback) {
  return d.contains(key) && !d[key].is_none() ? d[key].cast<T>() : fallback;
}

WorldOptions world_options(const py::dict& d) {
  static const std::set<std::string> known = {
      "buffer_size", "ucx_tls", "ucx_net_devices", "progress_mode", "timeout", "ctrl_uds_dir", "job_id", "auth_key",
      "authenticate", "start_store", "local_ip", "full_mesh", "store_timeout", "lease_ttl", "max_inflight"};
  for (auto item : d)
    if (!known.count(item.first.cast<std::string>()))
      throw InvalidArgumentError("unknown world option '" + item.first.cast<std::string>() + "'");
  WorldOptions o;
  o.session.buffer_size = opt<std::size_t>(d, "buffer_size", std::size_t{64} << 20);
  o.session.ucx_tls = opt<std::string>(d, "ucx_tls", "");
  o.session.ucx_net_devices = opt<std::string>(d, "ucx_net_devices", "");
  o.session.max_inflight = opt<std::size_t>(d, "max_inflight", o.session.max_inflight);
  const auto mode = runtime::parse_progress_mode(opt<std::string>(d, "progress_mode", "event"));
  if (!mode) throw InvalidArgumentError("progress_mode must be 'adaptive', 'event' or 'poll'");
  o.session.progress_mode = *mode;
  const auto timeout = to_ms(opt<double>(d, "timeout", 30.0));
  o.session.timeout = timeout;
  o.timeout = timeout;
  o.store.timeout = d.contains("store_timeout") && !d["store_timeout"].is_none() ? to_ms(d["store_timeout"].cast<double>()) : timeout;
  o.store.lease_ttl = std::chrono::seconds(opt<long>(d, "lease_ttl", 10));
  if (auto dir = opt<std::string>(d, "ctrl_uds_dir", ""); !dir.empty()) o.session.ctrl.uds_dir = dir;
  o.store.job_id = opt<std::string>(d, "job_id", "");
  o.session.auth_key = opt<std::string>(d, "auth_key", "");  // the store takes the session's (take_session_auth)
  o.session.authenticate = opt<bool>(d, "authenticate", true);
  o.store.auth_key = o.session.auth_key;
  o.store.authenticate = o.session.authenticate;
  if (d.contains("start_store") && !d["start_store"].is_none()) o.start_store = d["start_store"].cast<bool>();
  o.local_ip = opt<std::string>(d, "local_ip", "");
  o.full_mesh = opt<bool>(d, "full_mesh", false);
  return o;
}

StoreOptions store_options(const py::dict& d) {
  WorldOptions w = world_options(d);
  return w.store;
}

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

  std::shared_ptr<WorldOp> op(bool notify) {
    return std::make_shared<WorldOp>(next_id_++, notify ? queue_ : nullptr);
  }
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
    return in_to_out(in, out, notify, "all_gather input", "all_gather output", [&](auto i, auto u, auto done) {
      w().async_all_gather(i, u, to_ms(t), std::move(done));
    });
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
    return in_to_out(in, out, notify, "all_to_all input", "all_to_all output", [&](auto i, auto u, auto done) {
      w().async_all_to_all(i, u, to_ms(t), std::move(done));
    });
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

class PyStore {
 public:
  PyStore(const std::string& url, const py::dict& options) {
    StoreOptions o = store_options(options);
    py::gil_scoped_release release;
    store_ = std::make_unique<Store>(url, o);
  }
  Store& s() {
    if (!store_) throw ClosedError("the store is closed");
    return *store_;
  }
  std::chrono::milliseconds wait_of(Seconds t) {
    const auto ms = to_ms(t);
    return ms.count() == 0 ? s().options().timeout : ms;
  }
  void close() {
    if (!store_) return;
    py::gil_scoped_release release;
    store_.reset();
  }

 private:
  std::unique_ptr<Store> store_;
};

std::string as_string(py::handle v, const char* what) {
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  BufferView view(v, false, what);
  return std::string(static_cast<const char*>(view.data()), view.size());
}

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
      .def("address", [](PyWorld& w) {
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

  py::class_<PyStore>(m, "Store")
      .def(py::init<const std::string&, const py::dict&>())
      .def_property_readonly("url", [](PyStore& s) { return s.s().url(); })
      .def_property_readonly("job_id", [](PyStore& s) { return s.s().job_id(); })
      .def("set",
           [](PyStore& s, const std::string& key, py::handle value) {
             const std::string v = as_string(value, "store value");
             auto& st = s.s();
             py::gil_scoped_release release;
             st.set(key, v);
           })
      .def("get",
           [](PyStore& s, const std::string& key, Seconds t) {
             auto& st = s.s();
             const auto ms = s.wait_of(t);
             std::string v;
             {
               py::gil_scoped_release release;
               v = st.get(key, ms);
             }
             return py::bytes(v);
           })
      .def("wait",
           [](PyStore& s, const std::vector<std::string>& keys, Seconds t) {
             auto& st = s.s();
             const auto ms = s.wait_of(t);
             py::gil_scoped_release release;
             st.wait(keys, ms);
           })
      .def("add",
           [](PyStore& s, const std::string& key, std::int64_t delta) {
             auto& st = s.s();
             py::gil_scoped_release release;
             return st.add(key, delta);
           })
      .def("compare_set",
           [](PyStore& s, const std::string& key, py::handle expected, py::handle desired) {
             const std::string e = as_string(expected, "expected value"), d = as_string(desired, "desired value");
             auto& st = s.s();
             std::string v;
             {
               py::gil_scoped_release release;
               v = st.compare_set(key, e, d);
             }
             return py::bytes(v);
           })
      .def("delete",
           [](PyStore& s, const std::string& key) {
             auto& st = s.s();
             py::gil_scoped_release release;
             return st.erase(key);
           })
      .def("check",
           [](PyStore& s, const std::vector<std::string>& keys) {
             auto& st = s.s();
             py::gil_scoped_release release;
             return st.check(keys);
           })
      .def("local_address", [](PyStore& s) { return s.s().local_address(); })
      .def("close", &PyStore::close);

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

  py::class_<StoreServer>(m, "StoreServer")
      .def(py::init([](const std::string& auth_key, bool authenticate, std::size_t max_connections) {
             StoreServerOptions o;
             o.auth_key = auth_key;
             o.authenticate = authenticate;
             o.max_connections = max_connections;
             return std::make_unique<StoreServer>(o);
           }),
           py::arg("auth_key") = "", py::arg("authenticate") = true, py::arg("max_connections") = 4096)
      .def("listen",
           [](StoreServer& s, const std::string& host, std::uint16_t port) {
             py::gil_scoped_release release;
             return s.listen(host, port);
           })
      .def("connections", &StoreServer::connections)
      .def("keys", &StoreServer::keys)
      .def("close", [](StoreServer& s) {
        py::gil_scoped_release release;
        s.close();
      });
}
