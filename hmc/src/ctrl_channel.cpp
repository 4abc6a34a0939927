#include "hmc/ctrl_channel.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <future>
#include <map>
#include <optional>
#include <set>

#include "detail/byte_order.hpp"
#include "detail/ctrl_connection.hpp"
#include "detail/local_address.hpp"
#include "hmc/runtime/async_queue.hpp"
#include "hmc/runtime/async_ready_set.hpp"
#include "hmc/runtime/log.hpp"

namespace hmc {
namespace detail {

using runtime::log;
using tcp = asio::ip::tcp;
using uds = asio::local::stream_protocol;
using namespace asio::experimental::awaitable_operators;

namespace {

std::vector<std::byte> rank_frame(FrameType type, std::uint32_t rank) {
  std::byte payload[4];
  store_le32(payload, rank);
  return encode_frame(type, payload, sizeof payload);
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

class CtrlChannelImpl : public std::enable_shared_from_this<CtrlChannelImpl> {
 public:
  CtrlChannelImpl(runtime::EventLoop& l, std::uint32_t rank, CtrlOptions o)
      : loop(l), ex(l.executor()), self_rank(rank), opts(std::move(o)), connected(ex) {}

  struct Peer {
    explicit Peer(runtime::loop_executor e) : inbox(e) {}
    std::shared_ptr<CtrlConnection> conn;  // null once the connection ended
    runtime::AsyncQueue<CtrlMessage> inbox;
  };

  struct ConnectResult {
    error_code ec;
    std::string why;
    std::shared_ptr<CtrlConnection> conn;
    std::uint32_t rank = 0;
  };

  // Completes an HMC operation: the error code becomes the typed exception here, nowhere else.
  template <class Sig, class... Args>
  void complete(asio::any_completion_handler<Sig> h, error_code ec, const std::string& context, Args&&... args) {
    runtime::complete_later(ex, std::move(h), ec ? make_error(ec, context) : nullptr, std::forward<Args>(args)...);
  }

  std::string uds_path_for(std::uint16_t port) const {
    return opts.uds_dir + "/hmc-ctrl-" + std::to_string(port) + ".sock";
  }

  bool alive(std::uint32_t rank) const {
    auto it = peers.find(rank);
    return it != peers.end() && it->second->conn && it->second->conn->is_open();
  }

  std::shared_ptr<CtrlConnection> make_connection(CtrlConnection::socket_type s, std::string transport,
                                                  std::string remote) {
    return std::make_shared<CtrlConnection>(std::move(s), std::move(transport), std::move(remote),
                                            opts.max_frame_length, opts.send_timeout);
  }

  void add_peer(std::uint32_t rank, const std::shared_ptr<CtrlConnection>& conn) {
    auto& slot = peers[rank];
    slot = std::make_shared<Peer>(ex);  // a rank that reconnects after a loss starts with a fresh inbox
    slot->conn = conn;
    std::weak_ptr<Peer> weak_peer = slot;
    std::weak_ptr<CtrlChannelImpl> weak_self = weak_from_this();
    conn->start(
        [weak_peer, weak_self, rank](CtrlMessage m) {
          auto p = weak_peer.lock();
          if (!p) return;
          if (m.kind() != CtrlKind::transport) {
            p->inbox.push(std::move(m));
          } else if (auto self = weak_self.lock(); self && self->handlers.on_transport) {
            self->handlers.on_transport(rank, std::move(m));
          }
        },
        [weak_peer, weak_self, conn_raw = conn.get(), rank](error_code, const std::string& why) {
          auto p = weak_peer.lock();
          if (!p || p->conn.get() != conn_raw) return;
          log().info("ctrl peer rank {} lost: {}", rank, why);
          p->conn.reset();
          p->inbox.close(make_error_code(Status::PEER_LOST));
          if (auto self = weak_self.lock()) self->connected.reset(rank);
          if (auto self = weak_self.lock(); self && self->handlers.on_peer) self->handlers.on_peer(rank, false);
        });
    log().info("ctrl peer rank {} connected over {} ({})", rank, conn->transport(), conn->remote());
    if (handlers.on_peer) handlers.on_peer(rank, true);
    connected.set(rank);
  }

  template <class Acceptor>
  asio::awaitable<void> accept_loop(Acceptor& acceptor, std::string transport) {
    auto self = shared_from_this();
    for (;;) {
      error_code ec;
      auto s = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (closed || ec == asio::error::operation_aborted) co_return;
      if (ec) {
        log().warn("ctrl accept on {} failed: {}", transport, ec.message());
        asio::steady_timer pause(ex, std::chrono::milliseconds(10));  // e.g. out of fds: don't spin
        co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        continue;
      }
      std::string remote = transport;
      if constexpr (std::is_same_v<Acceptor, tcp::acceptor>) {
        s.set_option(tcp::no_delay(true), ec);
        auto ep = s.remote_endpoint(ec);
        if (!ec) remote = ep.address().to_string() + ":" + std::to_string(ep.port());
      }
      auto conn = make_connection(CtrlConnection::socket_type(std::move(s)), transport, remote);
      handshaking.insert(conn);
      asio::co_spawn(ex, server_handshake(conn), asio::detached);
    }
  }

  asio::awaitable<void> server_handshake(std::shared_ptr<CtrlConnection> conn) {
    auto self = shared_from_this();
    error_code ec;
    std::string problem;
    asio::steady_timer deadline(ex, opts.hello_timeout);
    auto first = co_await (conn->read_frame(ec, problem) || deadline.async_wait(asio::use_awaitable));
    handshaking.erase(conn);
    if (closed) co_return;
    std::string why;
    if (first.index() == 1) {
      why = "no HELLO within " + std::to_string(opts.hello_timeout.count()) + " ms";
    } else if (!problem.empty()) {
      why = problem;
    } else if (ec) {
      why = "closed before HELLO: " + ec.message();
    } else if (const Frame& f = std::get<0>(first); f.header.type != FrameType::hello) {
      why = "expected HELLO, got frame type " + std::to_string(static_cast<int>(f.header.type));
    } else {
      const std::uint32_t rank = load_le32(f.payload.data());
      if (rank == self_rank) {
        why = "HELLO with rank " + std::to_string(rank) + ", this server's own rank";
      } else if (alive(rank)) {
        why = "HELLO with duplicate rank " + std::to_string(rank) + " (already connected)";
      } else {
        conn->send(rank_frame(FrameType::hello_ack, self_rank), [](error_code) {});
        add_peer(rank, conn);
        co_return;
      }
      log().error("ctrl handshake from {} ({}) rejected: {}", conn->remote(), conn->transport(), why);
      auto reason = std::as_bytes(std::span(why.data(), why.size()));
      conn->send(encode_frame(FrameType::hello_reject, reason.data(), reason.size()),
                 [conn, why](error_code) { conn->close(make_error_code(Status::PROTOCOL_ERROR), why); });
      co_return;
    }
    log().error("ctrl handshake from {} ({}) failed: {}; closing it", conn->remote(), conn->transport(), why);
    conn->close(make_error_code(Status::PROTOCOL_ERROR), why);
  }

  asio::awaitable<ConnectResult> dial(std::string host, std::uint16_t port) {
    ConnectResult r;
    const bool local = is_local_address(host);
    const std::string path = uds_path_for(port);
    const bool use_uds = opts.transport == CtrlTransport::uds ||
                         (opts.transport == CtrlTransport::automatic && local && file_exists(path));
    if (opts.transport == CtrlTransport::uds && !local) {
      r.ec = make_error_code(Status::INVALID_CONFIG);
      r.why = "CTRL_TRANSPORT=uds but " + host + " is not an address of this host";
      co_return r;
    }
    CtrlConnection::socket_type sock(ex);
    std::string transport;
    if (use_uds) {
      uds::socket s(ex);
      co_await s.async_connect(uds::endpoint(path), asio::redirect_error(asio::use_awaitable, r.ec));
      if (r.ec) {
        r.why = "cannot connect to Unix socket " + path + ": " + r.ec.message();
        r.ec = make_error_code(Status::NOT_CONNECTED);
        co_return r;
      }
      sock = CtrlConnection::socket_type(std::move(s));
      transport = "uds";
    } else {
      tcp::resolver resolver(ex);
      auto endpoints = co_await resolver.async_resolve(host, std::to_string(port),
                                                       asio::redirect_error(asio::use_awaitable, r.ec));
      if (r.ec) {
        r.why = "cannot resolve " + host + ": " + r.ec.message();
        r.ec = make_error_code(Status::NOT_CONNECTED);
        co_return r;
      }
      tcp::socket s(ex);
      co_await asio::async_connect(s, endpoints, asio::redirect_error(asio::use_awaitable, r.ec));
      if (r.ec) {
        r.why = "cannot connect to " + host + ":" + std::to_string(port) + ": " + r.ec.message();
        r.ec = make_error_code(Status::NOT_CONNECTED);
        co_return r;
      }
      error_code ignored;
      s.set_option(tcp::no_delay(true), ignored);
      sock = CtrlConnection::socket_type(std::move(s));
      transport = "tcp";
    }
    auto conn = make_connection(std::move(sock), transport, host + ":" + std::to_string(port));
    conn->send(rank_frame(FrameType::hello, self_rank), [](error_code) {});
    std::string problem;
    error_code ec;
    Frame f = co_await conn->read_frame(ec, problem);
    if (!problem.empty() || ec) {
      r.ec = make_error_code(problem.empty() ? Status::PEER_LOST : Status::PROTOCOL_ERROR);
      r.why = problem.empty() ? "connection closed during HELLO: " + ec.message() : problem;
    } else if (f.header.type == FrameType::hello_reject) {
      r.ec = make_error_code(Status::PROTOCOL_ERROR);
      r.why = "server rejected HELLO: " + std::string(reinterpret_cast<const char*>(f.payload.data()), f.payload.size());
    } else if (f.header.type != FrameType::hello_ack) {
      r.ec = make_error_code(Status::PROTOCOL_ERROR);
      r.why = "expected HELLO_ACK, got frame type " + std::to_string(static_cast<int>(f.header.type));
    } else {
      r.rank = load_le32(f.payload.data());
      r.conn = conn;
      co_return r;
    }
    conn->close(r.ec, r.why);
    co_return r;
  }

  asio::awaitable<void> connect(std::string host, std::uint16_t port, std::chrono::milliseconds timeout,
                                CtrlChannel::connect_handler h) {
    auto self = shared_from_this();
    const std::string what = "ctrl connect to " + host + ":" + std::to_string(port);
    asio::steady_timer deadline(ex, timeout);
    auto r = co_await (dial(host, port) || deadline.async_wait(asio::use_awaitable));
    if (r.index() == 1) {
      complete(std::move(h), make_error_code(Status::TIMEOUT),
               what + " (no answer within " + std::to_string(timeout.count()) + " ms)", 0u);
      co_return;
    }
    ConnectResult& c = std::get<0>(r);
    if (!c.ec && closed) {
      c.conn->close(make_error_code(Status::CLOSED), "channel closed");
      c.ec = make_error_code(Status::CLOSED);
    } else if (!c.ec && alive(c.rank)) {
      c.why = "already connected to rank " + std::to_string(c.rank);
      c.ec = make_error_code(Status::PROTOCOL_ERROR);
      c.conn->close(c.ec, c.why);
    }
    if (c.ec) {
      complete(std::move(h), c.ec, c.why.empty() ? what : what + ": " + c.why, 0u);
      co_return;
    }
    add_peer(c.rank, c.conn);
    complete(std::move(h), error_code{}, what, c.rank);
  }

  void close_all() {
    if (closed) return;
    closed = true;
    error_code ignored;
    if (tcp_acceptor) tcp_acceptor->close(ignored);
    if (uds_acceptor) {
      uds_acceptor->close(ignored);
      ::unlink(uds_path.c_str());
    }
    for (const auto& c : std::set<std::shared_ptr<CtrlConnection>>(handshaking))
      c->close(make_error_code(Status::CLOSED), "channel closed");
    handshaking.clear();
    for (auto& [rank, peer] : peers)
      if (peer->conn) peer->conn->close(make_error_code(Status::CLOSED), "channel closed");
    connected.close(make_error_code(Status::CLOSED));
  }

  runtime::EventLoop& loop;
  runtime::loop_executor ex;
  CtrlHandlers handlers;
  const std::uint32_t self_rank;
  const CtrlOptions opts;
  std::map<std::uint32_t, std::shared_ptr<Peer>> peers;
  runtime::AsyncReadySet<std::uint32_t> connected;  // ranks with a live connection, for async_wait_peer
  std::set<std::shared_ptr<CtrlConnection>> handshaking;
  std::optional<tcp::acceptor> tcp_acceptor;
  std::optional<uds::acceptor> uds_acceptor;
  std::string uds_path;
  bool closed = false;
};

}  // namespace detail


CtrlChannel::CtrlChannel(runtime::EventLoop& loop, std::uint32_t self_rank, CtrlOptions options)
    : loop_(loop), impl_(std::make_shared<detail::CtrlChannelImpl>(loop, self_rank, std::move(options))) {}

CtrlChannel::~CtrlChannel() { close(); }

std::uint32_t CtrlChannel::rank() const noexcept { return impl_->self_rank; }

void CtrlChannel::set_handlers(CtrlHandlers handlers) {
  loop_.call([&] { impl_->handlers = std::move(handlers); });
}

runtime::loop_executor CtrlChannel::executor() const noexcept { return impl_->ex; }

std::uint16_t CtrlChannel::listen(const std::string& bind_ip, std::uint16_t port) {
  return loop_.call([&]() -> std::uint16_t {
    auto& impl = *impl_;
    if (impl.closed) throw ClosedError("listen on a closed control channel");
    if (impl.tcp_acceptor) throw InvalidArgumentError("control channel is already listening");
    runtime::error_code ec;
    const auto addr = runtime::asio::ip::make_address(bind_ip, ec);
    if (ec) throw InvalidArgumentError("listen: '" + bind_ip + "' is not an IP address");
    detail::tcp::acceptor acc(impl.ex);
    const detail::tcp::endpoint ep(addr, port);
    acc.open(ep.protocol(), ec);
    if (!ec) acc.set_option(detail::tcp::acceptor::reuse_address(true), ec);
    if (!ec) acc.bind(ep, ec);
    if (!ec) acc.listen(runtime::asio::socket_base::max_listen_connections, ec);
    if (ec)
      throw InvalidConfigError("cannot listen on " + bind_ip + ":" + std::to_string(port) + ": " + ec.message());
    const std::uint16_t bound = acc.local_endpoint().port();
    impl.tcp_acceptor.emplace(std::move(acc));
    runtime::asio::co_spawn(impl.ex, impl.accept_loop(*impl.tcp_acceptor, "tcp"), runtime::asio::detached);

    if (impl.opts.transport != CtrlTransport::tcp) {
      const std::string path = impl.uds_path_for(bound);
      ::unlink(path.c_str());  // a stale file from a dead server; the TCP port is ours, so is this name
      detail::uds::acceptor uacc(impl.ex);
      uacc.open(detail::uds::endpoint(path).protocol(), ec);
      if (!ec) uacc.bind(detail::uds::endpoint(path), ec);
      if (!ec) uacc.listen(runtime::asio::socket_base::max_listen_connections, ec);
      if (ec) {
        if (impl.opts.transport == CtrlTransport::uds)
          throw InvalidConfigError("cannot listen on Unix socket " + path + ": " + ec.message());
        runtime::log().warn("ctrl: no Unix socket listener at {} ({}); same-host peers will use TCP", path,
                            ec.message());
      } else {
        impl.uds_path = path;
        impl.uds_acceptor.emplace(std::move(uacc));
        runtime::asio::co_spawn(impl.ex, impl.accept_loop(*impl.uds_acceptor, "uds"), runtime::asio::detached);
      }
    }
    runtime::log().info("ctrl rank {} listening on {}:{} and {}", impl.self_rank, bind_ip, bound,
                        impl.uds_path.empty() ? "no Unix socket" : impl.uds_path);
    return bound;
  });
}

void CtrlChannel::deliver(std::uint32_t rank, CtrlMessage message) {
  loop_.call([&] {
    if (impl_->alive(rank)) impl_->peers.at(rank)->inbox.push(std::move(message));
  });
}

std::string CtrlChannel::uds_path() const {
  return loop_.call([&] { return impl_->uds_path; });
}

std::vector<std::uint32_t> CtrlChannel::peers() const {
  return loop_.call([&] {
    std::vector<std::uint32_t> out;
    for (const auto& [rank, peer] : impl_->peers)
      if (impl_->alive(rank)) out.push_back(rank);
    return out;
  });
}

std::string CtrlChannel::transport_of(std::uint32_t rank) const {
  return loop_.call([&] {
    if (!impl_->alive(rank)) throw NotConnectedError("no control connection to rank " + std::to_string(rank));
    return impl_->peers.at(rank)->conn->transport();
  });
}

void CtrlChannel::disconnect(std::uint32_t rank) {
  loop_.call([&] {
    auto it = impl_->peers.find(rank);
    if (it != impl_->peers.end() && it->second->conn)
      it->second->conn->close(make_error_code(Status::CLOSED), "disconnected locally");
  });
}

void CtrlChannel::close() {
  loop_.call([&] { impl_->close_all(); });
}

void CtrlChannel::start_connect(const std::shared_ptr<detail::CtrlChannelImpl>& impl, std::string host,
                                std::uint16_t port, std::chrono::milliseconds timeout, connect_handler h) {
  if (impl->closed) {
    impl->complete(std::move(h), make_error_code(Status::CLOSED), "ctrl connect on a closed channel", 0u);
    return;
  }
  runtime::asio::co_spawn(impl->ex, impl->connect(std::move(host), port, timeout, std::move(h)),
                          runtime::asio::detached);
}

void CtrlChannel::start_wait_peer(const std::shared_ptr<detail::CtrlChannelImpl>& impl, std::uint32_t rank,
                                  std::chrono::milliseconds timeout, asio_handler h) {
  const std::string what = "waiting for ctrl peer rank " + std::to_string(rank);
  if (impl->closed) return impl->complete(std::move(h), make_error_code(Status::CLOSED), what);
  auto slot = runtime::asio::get_associated_cancellation_slot(h);
  impl->connected.async_wait(rank, timeout,
                             runtime::asio::bind_cancellation_slot(
                                 slot, [impl, what, h = std::move(h)](runtime::error_code ec) mutable {
                                   impl->complete(std::move(h), ec, what);
                                 }));
}

void CtrlChannel::start_send(const std::shared_ptr<detail::CtrlChannelImpl>& impl, std::uint32_t rank, CtrlMessage m,
                             asio_handler h) {
  const std::string what = "ctrl_send to rank " + std::to_string(rank);
  if (impl->closed) return impl->complete(std::move(h), make_error_code(Status::CLOSED), what);
  if (m.bytes().size() > impl->opts.max_frame_length)
    return impl->complete(std::move(h), make_error_code(Status::INVALID_ARGUMENT),
                          what + ": " + std::to_string(m.bytes().size()) + " bytes exceed the maximum frame of " +
                              std::to_string(impl->opts.max_frame_length));
  auto it = impl->peers.find(rank);
  if (it == impl->peers.end()) return impl->complete(std::move(h), make_error_code(Status::NOT_CONNECTED), what);
  if (!impl->alive(rank)) return impl->complete(std::move(h), make_error_code(Status::PEER_LOST), what);
  const auto type = static_cast<detail::FrameType>(m.kind());  // CtrlKind values are the frame types
  it->second->conn->send(detail::encode_frame(type, m.bytes().data(), m.bytes().size()),
                         [impl, what, h = std::move(h)](runtime::error_code ec) mutable {
                           impl->complete(std::move(h), ec, what);
                         });
}

void CtrlChannel::start_recv(const std::shared_ptr<detail::CtrlChannelImpl>& impl, std::uint32_t rank,
                             std::chrono::milliseconds timeout, recv_handler h) {
  const std::string what = "ctrl_recv from rank " + std::to_string(rank);
  if (impl->closed) return impl->complete(std::move(h), make_error_code(Status::CLOSED), what, CtrlMessage{});
  auto it = impl->peers.find(rank);
  if (it == impl->peers.end())
    return impl->complete(std::move(h), make_error_code(Status::NOT_CONNECTED), what, CtrlMessage{});
  auto slot = runtime::asio::get_associated_cancellation_slot(h);
  it->second->inbox.async_pop(
      timeout, runtime::asio::bind_cancellation_slot(
                   slot, [impl, what, h = std::move(h)](runtime::error_code ec, CtrlMessage msg) mutable {
                     impl->complete(std::move(h), ec, what, std::move(msg));
                   }));
}

}  // namespace hmc
