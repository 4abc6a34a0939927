#include "hmc/session.hpp"

#include <algorithm>
#include <cstdlib>
#include <future>
#include <optional>
#include <string>

#include "hmc/error.hpp"
#include "metrics/metrics_endpoint.hpp"
#include "session/session_impl.hpp"
#include "staging/staging_transport.hpp"
#include "transport/fast_message.hpp"

namespace hmc {

namespace {

// A transport completion for the caller: the typed exception (its text built only on failure, so
// nothing is allocated on the hot path), then the handler run on its own executor. Transports run
// completions from a post of their own (never inside the code that found the result), so on the
// loop's own executor the handler is called directly: what dispatch would do, without going
// through the type-erased executor (about half of an 8 B put's CPU at depth 64 on shm).
template <class Context>
detail::Transport::Completion to_caller(runtime::loop_executor ex, Session::handler h, Context context) {
  return [ex, h = std::move(h), context](runtime::error_code ec) mutable {
    std::exception_ptr e;
    if (ec) e = make_error(ec, context());
    const auto target = runtime::asio::get_associated_executor(h, ex);  // before h is moved from
    if (ex.running_in_this_thread() && runtime::is_loop_executor(target, ex)) return std::move(h)(e);
    runtime::asio::dispatch(target, runtime::asio::append(std::move(h), e));
  };
}

}  // namespace

namespace {
// SessionOptions::metrics_port, else HMC_METRICS_PORT; 0: no endpoint.
std::uint16_t metrics_port(const SessionOptions& o) {
  if (o.metrics_port != 0) return o.metrics_port;
  const char* env = std::getenv("HMC_METRICS_PORT");
  if (env == nullptr || *env == '\0') return 0;
  char* end = nullptr;
  const unsigned long v = std::strtoul(env, &end, 10);
  if (*end != '\0' || v > 65535 || *env == '-')
    throw InvalidConfigError(std::string("HMC_METRICS_PORT='") + env + "' is not a port (0 to 65535)");
  return static_cast<std::uint16_t>(v);
}

// The endpoint's view of a session: its stats from its own loop, or nothing after a second (a
// caller-driven loop nobody drives, or one busy closing) so that a scrape never hangs.
std::optional<SessionStats> stats_for_metrics(const std::weak_ptr<detail::SessionImpl>& weak) {
  auto impl = weak.lock();
  if (!impl) return std::nullopt;
  auto answer = std::make_shared<std::promise<SessionStats>>();
  auto f = answer->get_future();
  runtime::post_to_loop(impl->loop.executor(), [answer, weak] {
    if (auto i = weak.lock()) answer->set_value(i->stats());
  });
  if (f.wait_for(std::chrono::seconds(1)) != std::future_status::ready) return std::nullopt;
  try {
    return f.get();
  } catch (const std::future_error&) {
    return std::nullopt;  // the session went first
  }
}
}  // namespace

Session::Session(SessionOptions options) {
  // The endpoint first: an address that cannot be listened on throws before any thread starts.
  std::shared_ptr<detail::MetricsEndpoint> metrics;
  if (const std::uint16_t port = metrics_port(options); port != 0)
    metrics = detail::MetricsEndpoint::at(options.metrics_host, port);
  runtime::EventLoopOptions lo;
  lo.mode = options.progress_mode;
  loop_ = std::make_unique<runtime::EventLoop>(lo);
  if (options.progress_thread == ProgressThread::own) loop_->start();
  if (options.progress_thread == ProgressThread::shared) loop_->start_keeper();
  impl_ = std::make_shared<detail::SessionImpl>(*loop_, std::move(options));
  loop_->call([&] { impl_->start_on_loop(); });
  conn_type_ = impl_->opts.conn_type;
  if (metrics) {
    impl_->metrics_id =
        metrics->add([weak = std::weak_ptr<detail::SessionImpl>(impl_)] { return stats_for_metrics(weak); });
    impl_->metrics = std::move(metrics);
  }
}

Session::~Session() {
  if (impl_->metrics) {
    impl_->metrics->remove(impl_->metrics_id);  // no scrape reads it from here on
    impl_->metrics.reset();
  }
  alive_.reset();  // RegisteredMemory handles that outlive us do nothing
  close();
  // From a completion handler on our own loop the loop's run() is on the stack: the loop and the
  // impl are then destroyed on this thread once that run() returns (docs/architecture.md).
  runtime::EventLoop::destroy(std::move(loop_), std::move(impl_));
}

ConnBuffer& Session::buffer() noexcept { return *impl_->buffer; }
const SessionOptions& Session::options() const noexcept { return impl_->opts; }
runtime::loop_executor Session::executor() const noexcept { return loop_->executor(); }
runtime::EventLoop& Session::event_loop() const noexcept { return *loop_; }

void Session::init_server(const std::string& bind_ip, std::uint16_t ucx_port, std::uint16_t rdma_port,
                          std::uint16_t ctrl_tcp_port, std::uint32_t self_id, const std::string& ctrl_uds_dir) {
  loop_->call([&] {
    if (impl_->closed) throw ClosedError("init_server on a closed session");
    if (rdma_port != 0 && ucx_port == 0) {
      impl_->use_conn(ConnType::RDMA);
      impl_->conn = ConnType::RDMA;
    }
    conn_type_ = impl_->conn;
    impl_->ensure_ctrl(self_id, ctrl_uds_dir);
    impl_->advertised_ip = bind_ip == "0.0.0.0" ? impl_->opts.local_ip : bind_ip;
    impl_->bind_ip = bind_ip;
    // Each transport's clients name this session by its own port; a port not given is the other's.
    impl_->data_port = {ucx_port != 0 ? ucx_port : rdma_port, rdma_port != 0 ? rdma_port : ucx_port};
  });
  const std::uint16_t bound = impl_->ctrl->listen(bind_ip, ctrl_tcp_port);
  loop_->call([&] { impl_->ctrl_port = bound; });
}

void Session::init_server(const std::string& ip, std::uint16_t ctrl_port, ConnType conn) {
  loop_->call([&] {
    if (impl_->closed) throw ClosedError("init_server on a closed session");
    impl_->use_conn(conn);
    impl_->conn = conn;
    conn_type_ = impl_->conn;
    impl_->ensure_ctrl(0, {});
    impl_->advertised_ip = ip == "0.0.0.0" ? impl_->opts.local_ip : ip;
    impl_->bind_ip = ip;
  });
  const std::uint16_t bound = impl_->ctrl->listen(ip, ctrl_port);
  // The one public port is also how clients of every transport name this session.
  loop_->call([&] { impl_->ctrl_port = impl_->data_port[0] = impl_->data_port[1] = bound; });
}

void Session::close_server() {
  loop_->call([&] {
    if (impl_->ctrl) impl_->ctrl->stop_listening();
  });
}

void Session::set_local_ip(const std::string& ip) {
  if (ip.empty() || ip == "0.0.0.0")
    throw InvalidArgumentError("set_local_ip: '" + ip + "' is not an address peers can reach");
  loop_->call([&] {
    if (impl_->closed) throw ClosedError("set_local_ip on a closed session");
    impl_->opts.local_ip = ip;
  });
}

std::uint32_t Session::rank() const {
  return loop_->call([&] {
    if (!impl_->ctrl || impl_->ctrl->rank() == CtrlChannel::any_rank)
      throw NotConnectedError("rank: not assigned yet; call init_server() or connect() first");
    return impl_->ctrl->rank();
  });
}

std::uint16_t Session::ctrl_port() const {
  return loop_->call([&]() -> std::uint16_t {
    if (impl_->ctrl_port == 0) throw NotConnectedError("ctrl_port: init_server() was not called");
    return impl_->ctrl_port;
  });
}

std::vector<std::uint32_t> Session::peers() const {
  return loop_->call([&] { return impl_->transport ? impl_->transport->ranks() : std::vector<std::uint32_t>{}; });
}

std::uint32_t Session::resolve_peer(const std::string& ip, std::optional<std::uint16_t> data_port) const {
  return loop_->call([&] {
    std::uint32_t rank = 0;
    if (std::exception_ptr e = impl_->resolve(ip, data_port, rank)) std::rethrow_exception(e);
    return rank;
  });
}

std::vector<MemoryType> Session::native_memory_types() const {
  return loop_->call([&] { return impl_->staging_options(impl_->conn).native; });
}

bool Session::buffer_staged() const {
  return loop_->call([&] {
    const auto* staging = dynamic_cast<const detail::StagingTransport*>(&impl_->default_plane());
    return staging != nullptr && staging->buffer_staged();
  });
}

std::string Session::transports(std::uint32_t rank) const {
  return loop_->call([&] {
    if (!impl_->transport || impl_->transport->peer(rank) == nullptr)
      throw NotConnectedError("no data connection to rank " + std::to_string(rank));
    return impl_->transport->carriers(rank);
  });
}

ConnType Session::peer_conn(std::uint32_t rank) const {
  if (std::optional<ConnType> c = impl_->peer_conn(rank)) return *c;
  throw NotConnectedError("no connection to rank " + std::to_string(rank));
}

void Session::check_conn(std::uint32_t rank, ConnType conn) const {
  if (conn == ConnType::UCX && impl_->rdma_peers.load(std::memory_order_relaxed) == 0) return;
  const std::optional<ConnType> actual = impl_->peer_conn(rank);
  if (!actual || *actual == conn) return;  // a rank not connected fails in the operation itself
  const auto name = [](ConnType c) { return std::string(c == ConnType::RDMA ? "ConnType.RDMA" : "ConnType.UCX"); };
  throw InvalidArgumentError("conn=" + name(conn) + ", but rank " + std::to_string(rank) + " is connected over " +
                             name(*actual) + " (connect(..., conn=) chose it; disconnect and connect again to change)");
}

SessionStats Session::stats() const {
  return loop_->call([&] { return impl_->stats(); });
}

namespace detail {
SessionStats SessionImpl::stats() const {
  SessionStats s;
  s.peers_lost = loss_seq;
  if (ctrl) s.ctrl = ctrl->stats();
  if (!transport) return s;
  transport->add_stats(s);
  s.peers_connected = transport->ranks().size();
  for (PeerStats& p : s.peers)
    if (transport->peer(p.rank) != nullptr) p.transport = transport->carriers(p.rank);
  std::sort(s.peers.begin(), s.peers.end(), [](const PeerStats& a, const PeerStats& b) { return a.rank < b.rank; });
  return s;
}
}  // namespace detail

void Session::start_rma_on_loop(const std::shared_ptr<detail::SessionImpl>& impl, bool is_put, bool pipeline,
                                std::uint32_t peer, std::uint64_t region, std::span<const Segment> segments,
                                std::size_t chunk, std::size_t window, handler h) {
  const auto ex = impl->loop.executor();
  if (auto error = impl->validate(is_put, peer, region, segments, chunk, window, pipeline))
    return runtime::complete_later(ex, std::move(h), error);
  detail::OpRequest request;
  request.rank = peer;
  request.kind = is_put ? detail::OpKind::put : detail::OpKind::get;
  request.region = region;
  request.segments = segments;
  request.chunk = pipeline ? chunk : 0;
  request.window = window;
  impl->transport->submit(request, to_caller(ex, std::move(h), [is_put, peer] {
                            return std::string(is_put ? "put to rank " : "get from rank ") + std::to_string(peer);
                          }));
}

void Session::start_put_notify_on_loop(const std::shared_ptr<detail::SessionImpl>& impl, std::uint32_t peer,
                                       std::uint64_t region, std::span<const Segment> segments, CtrlMessage message,
                                       handler h) {
  const auto ex = impl->loop.executor();
  if (auto error = impl->validate(true, peer, region, segments, 0, 0, false))
    return runtime::complete_later(ex, std::move(h), error);
  if (message.bytes().size() > impl->opts.ctrl.max_frame_length)
    return runtime::complete_later(
        ex, std::move(h),
        std::make_exception_ptr(InvalidArgumentError("put_notify: " + std::to_string(message.bytes().size()) +
                                                     " bytes exceed the maximum control message of " +
                                                     std::to_string(impl->opts.ctrl.max_frame_length))));
  if (impl->fast_send.count(peer) == 0) {
    // No fast path to the peer (yet): the put, then the message on the control channel, in order.
    detail::OpRequest put;
    put.rank = peer;
    put.region = region;
    put.segments = segments;
    return impl->transport->submit(
        put, [impl, peer, m = std::move(message), h = std::move(h)](runtime::error_code ec) mutable {
          if (!ec) return start_ctrl_send(impl, peer, std::move(m), std::move(h));
          to_caller(impl->loop.executor(), std::move(h),
                    [peer] { return "put_notify to rank " + std::to_string(peer); })(ec);
        });
  }
  const std::vector<std::byte> wire = detail::encode_fast_message(message);
  ++impl->fast_sent[peer];
  detail::OpRequest request;
  request.rank = peer;
  request.kind = detail::OpKind::put_notify;
  request.region = region;
  request.segments = segments;
  request.message = wire;
  impl->transport->submit(request,
                          to_caller(ex, std::move(h), [peer] { return "put_notify to rank " + std::to_string(peer); }));
}

std::future<void> Session::put_nb(std::uint32_t peer, std::size_t local_off, std::size_t remote_off, std::size_t size) {
  return async_put(peer, local_off, remote_off, size, runtime::asio::use_future);
}

std::future<void> Session::get_nb(std::uint32_t peer, std::size_t local_off, std::size_t remote_off, std::size_t size) {
  return async_get(peer, local_off, remote_off, size, runtime::asio::use_future);
}

void Session::start_ctrl_send(const std::shared_ptr<detail::SessionImpl>& impl, std::uint32_t peer, CtrlMessage m,
                              handler h) {
  if (!impl->ctrl || impl->closed)
    return runtime::complete_later(
        impl->loop.executor(), std::move(h),
        impl->closed ? std::make_exception_ptr(ClosedError("ctrl_send on a closed session"))
                     : std::make_exception_ptr(NotConnectedError("ctrl_send: init_server() or connect() first")));
  if (impl->fast_send.count(peer) != 0 && impl->transport) {
    if (m.bytes().size() > impl->opts.ctrl.max_frame_length)
      return runtime::complete_later(
          impl->loop.executor(), std::move(h),
          std::make_exception_ptr(InvalidArgumentError("ctrl_send: " + std::to_string(m.bytes().size()) +
                                                       " bytes exceed the maximum control message of " +
                                                       std::to_string(impl->opts.ctrl.max_frame_length))));
    const std::vector<std::byte> wire = detail::encode_fast_message(m);
    ++impl->fast_sent[peer];
    detail::OpRequest request;
    request.rank = peer;
    request.kind = detail::OpKind::message;
    request.message = wire;
    return impl->transport->submit(request, to_caller(impl->loop.executor(), std::move(h),
                                                      [peer] { return "ctrl_send to rank " + std::to_string(peer); }));
  }
  impl->ctrl->async_send(peer, std::move(m), std::move(h));
}

void Session::start_ctrl_recv(const std::shared_ptr<detail::SessionImpl>& impl, std::uint32_t peer,
                              std::chrono::milliseconds timeout,
                              runtime::asio::any_completion_handler<void(std::exception_ptr, CtrlMessage)> h) {
  if (!impl->ctrl || impl->closed)
    return runtime::complete_later(
        impl->loop.executor(), std::move(h),
        impl->closed ? std::make_exception_ptr(ClosedError("ctrl_recv on a closed session"))
                     : std::make_exception_ptr(NotConnectedError("ctrl_recv: init_server() or connect() first")),
        CtrlMessage{});
  impl->ctrl->async_recv(peer, timeout, std::move(h));
}

void Session::start_wait_notify(const std::shared_ptr<detail::SessionImpl>& impl, std::uint32_t peer, std::uint64_t tag,
                                std::uint64_t count, std::chrono::milliseconds timeout, handler h) {
  if (!impl->ctrl || impl->closed)
    return runtime::complete_later(
        impl->loop.executor(), std::move(h),
        impl->closed ? std::make_exception_ptr(ClosedError("wait_notify on a closed session"))
                     : std::make_exception_ptr(NotConnectedError("wait_notify: init_server() or connect() first")));
  impl->ctrl->async_wait_tag(peer, tag, count, timeout, std::move(h));
}

void Session::disconnect(std::uint32_t peer) {
  loop_->call([&] { impl_->peer_down(peer, "disconnect() dropped it on this side"); });
}

void Session::start_close(const std::shared_ptr<detail::SessionImpl>& impl, handler h) {
  impl->start_close(std::move(h));
}

}  // namespace hmc
