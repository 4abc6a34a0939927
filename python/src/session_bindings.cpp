// _hmc's session half: SessionHandle (one hmc::Session), the Ops it returns, registered user
// memory, the completion queue asyncio and the callback thread drain, and memory queries.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "completion_queue.hpp"
#include "fast_call.hpp"
#include "hmc/memory.hpp"
#include "options.hpp"
#include "session_handle.hpp"
#include "stats_dict.hpp"

namespace py = pybind11;

namespace hmc::python {

void bind_session(py::module_& m) {
  py::class_<CompletionQueue, std::shared_ptr<CompletionQueue>>(m, "CompletionQueue")
      .def(py::init<>())
      .def("fd", &CompletionQueue::fd)
      .def("drain", &CompletionQueue::drain);

  py::class_<Op>(m, "Op")
      .def_property_readonly("id", &Op::id)
      .def("done", &Op::done)
      .def("wait", &Op::wait, py::arg("timeout") = py::none())
      .def("result", &Op::result)
      .def("notify", &Op::notify)
      .def("cancel", &Op::cancel);

  py::class_<Registered>(m, "Registered")
      .def_property_readonly("nbytes", &Registered::size)
      .def("release", &Registered::release);

  py::class_<SessionHandle> handle(m, "SessionHandle");
  handle
      .def(py::init([](std::size_t buffer_size, int mem_type, int device_id, std::string local_ip,
                       std::string progress_mode, std::string progress_thread, std::string ucx_tls,
                       std::string ucx_net_devices, double timeout, std::string uds_dir,
                       std::optional<std::string> auth_key, bool authenticate, std::optional<double> heartbeat_interval,
                       std::optional<std::uint32_t> heartbeat_misses, std::optional<std::string> tls_cert,
                       std::optional<std::string> tls_key, std::optional<std::string> tls_ca, std::size_t num_chs,
                       bool shared_memory, std::uint16_t metrics_port, std::string metrics_host) {
             return std::make_unique<SessionHandle>(session_options(SessionArgs{buffer_size,
                                                                                mem_type,
                                                                                device_id,
                                                                                std::move(local_ip),
                                                                                std::move(progress_mode),
                                                                                std::move(progress_thread),
                                                                                std::move(ucx_tls),
                                                                                std::move(ucx_net_devices),
                                                                                timeout,
                                                                                std::move(uds_dir),
                                                                                std::move(auth_key),
                                                                                authenticate,
                                                                                heartbeat_interval,
                                                                                heartbeat_misses,
                                                                                std::move(tls_cert),
                                                                                std::move(tls_key),
                                                                                std::move(tls_ca),
                                                                                num_chs,
                                                                                shared_memory,
                                                                                metrics_port,
                                                                                std::move(metrics_host)}));
           }),
           py::arg("buffer_size"), py::arg("mem_type"), py::arg("device_id"), py::arg("local_ip"),
           py::arg("progress_mode"), py::arg("progress_thread"), py::arg("ucx_tls"), py::arg("ucx_net_devices"),
           py::arg("timeout"), py::arg("uds_dir"), py::arg("auth_key") = py::none(), py::arg("authenticate") = true,
           py::arg("heartbeat_interval") = py::none(), py::arg("heartbeat_misses") = py::none(),
           py::arg("tls_cert") = py::none(), py::arg("tls_key") = py::none(), py::arg("tls_ca") = py::none(),
           py::arg("num_chs") = 1, py::arg("shared_memory") = true, py::arg("metrics_port") = 0,
           py::arg("metrics_host") = "")
      .def("init_server",
           [](SessionHandle& h, const std::string& ip, std::uint16_t ucx_port, std::uint16_t rdma_port,
              std::uint16_t ctrl_port, std::uint32_t self_id, const std::string& uds_dir) {
             h.blocking([&](Session& s) { s.init_server(ip, ucx_port, rdma_port, ctrl_port, self_id, uds_dir); });
           })
      .def("init_server_sdk",
           [](SessionHandle& h, const std::string& ip, std::uint16_t port, int conn) {
             h.blocking([&](Session& s) { s.init_server(ip, port, static_cast<ConnType>(conn)); });
           })
      .def("connect",
           [](SessionHandle& h, std::uint32_t peer_id, std::uint32_t self_id, const std::string& ip,
              std::uint16_t data_port, std::uint16_t ctrl_port, int conn, Seconds timeout) {
             return h.blocking([&](Session& s) {
               return s.connect(peer_id, self_id, ip, data_port, ctrl_port, static_cast<ConnType>(conn),
                                to_ms(timeout, s.options().timeout, "timeout"));
             });
           })
      .def("connect_sdk",
           [](SessionHandle& h, const std::string& ip, std::uint16_t port, int conn, Seconds timeout) {
             return h.blocking([&](Session& s) {
               return s.connect(ip, port, static_cast<ConnType>(conn), to_ms(timeout, s.options().timeout, "timeout"));
             });
           })
      .def("close_server", [](SessionHandle& h) { h.blocking([](Session& s) { s.close_server(); }); })
      .def("set_local_ip",
           [](SessionHandle& h, const std::string& ip) { h.blocking([&](Session& s) { s.set_local_ip(ip); }); })
      .def("wait_peer",
           [](SessionHandle& h, std::uint32_t rank, Seconds timeout) {
             h.blocking([&](Session& s) { s.wait_peer(rank, to_ms(timeout, s.options().timeout, "timeout")); });
           })
      .def("rank", [](SessionHandle& h) { return h.use()->rank(); })
      .def("ctrl_port", [](SessionHandle& h) { return h.use()->ctrl_port(); })
      .def("peers", [](SessionHandle& h) { return h.use()->peers(); })
      .def("resolve", [](SessionHandle& h, const std::string& ip,
                         std::optional<std::uint16_t> port) { return h.use()->resolve_peer(ip, port); })
      .def("wait_peer_at",
           [](SessionHandle& h, const std::string& ip, std::optional<std::uint16_t> port, Seconds timeout) {
             return h.blocking(
                 [&](Session& s) { return s.wait_peer_at(ip, port, to_ms(timeout, s.options().timeout, "timeout")); });
           })
      .def("transports", [](SessionHandle& h, std::uint32_t rank) { return h.use()->transports(rank); })
      .def("peer_conn", [](SessionHandle& h, std::uint32_t rank) { return static_cast<int>(h.use()->peer_conn(rank)); })
      .def("check_conn", [](SessionHandle& h, std::uint32_t rank,
                            int conn) { h.use()->check_conn(rank, static_cast<ConnType>(conn)); })
      .def("native_memory_types",
           [](SessionHandle& h) {
             std::vector<int> out;
             for (MemoryType t : h.use()->native_memory_types()) out.push_back(static_cast<int>(t));
             return out;
           })
      .def("buffer_staged", [](SessionHandle& h) { return h.use()->buffer_staged(); })
      .def("stats", [](SessionHandle& h) { return stats_dict(h.use()->stats()); })
      .def("buffer_size", [](SessionHandle& h) { return h.use()->buffer().size(); })
      .def("buffer_ptr", [](SessionHandle& h) { return reinterpret_cast<std::uintptr_t>(h.use()->buffer().data()); })
      .def("buffer_mem_type", [](SessionHandle& h) { return static_cast<int>(h.use()->buffer().type()); })
      .def("buffer_device_id", [](SessionHandle& h) { return h.use()->buffer().device_id(); })
      .def("write", &SessionHandle::write, py::arg("obj"), py::arg("offset"))
      .def("read_into", &SessionHandle::read_into, py::arg("obj"), py::arg("nbytes"), py::arg("offset"))
      .def("read_bytes", &SessionHandle::read_bytes)
      .def("copy_within", &SessionHandle::copy_within)
      .def("copy_ptr", &SessionHandle::copy_ptr)
      .def("rma", &SessionHandle::rma)
      .def("batch", &SessionHandle::batch)
      .def("batch_array", &SessionHandle::batch_array)
      .def("blocks", &SessionHandle::blocks)
      .def("pipeline", &SessionHandle::pipeline)
      .def("registered_rma", &SessionHandle::registered)
      .def("put_notify", &SessionHandle::put_notify)
      .def("registered_put_notify", &SessionHandle::registered_put_notify)
      .def("register", &SessionHandle::register_memory)
      .def("ctrl_send", &SessionHandle::ctrl_send)
      .def("ctrl_recv", &SessionHandle::ctrl_recv)
      .def("wait_notify", &SessionHandle::wait_notify)
      .def("completion_fd", &SessionHandle::completion_fd)
      .def("wakeup_fd", &SessionHandle::wakeup_fd)
      .def("progress", &SessionHandle::progress, py::arg("soon") = false)
      .def("set_soon", &SessionHandle::set_soon)
      .def("drain", &SessionHandle::drain)
      .def("disconnect",
           [](SessionHandle& h, std::uint32_t rank) { h.blocking([&](Session& s) { s.disconnect(rank); }); })
      .def("close", &SessionHandle::close);
  add_fast_calls(handle);

  m.def("memory_available", [](int type, int device_id) {
    std::string why;
    const bool ok = Memory::available(static_cast<MemoryType>(type), device_id, &why);
    return py::make_tuple(ok, why);
  });
  m.attr("MAX_NUM_CHS") = kMaxNumChs;
}

}  // namespace hmc::python
