// The server side: listening, accepting, the server handshake and the Unix-socket upgrade.
#include "ctrl/ctrl_channel_impl.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include "ctrl/ctrl_socket.hpp"
#include "ctrl/uds_dir.hpp"

namespace hmc {
namespace detail {

namespace {

// Whether a whole well-formed handshake frame already waits on a fresh socket (peeked, not read).
bool frame_waiting(int fd) {
  std::array<std::byte, kFrameHeaderSize + kMaxHandshakeFrame> buf;
  const ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_PEEK | MSG_DONTWAIT);
  if (n < static_cast<ssize_t>(kFrameHeaderSize)) return false;
  HeaderBytes h;
  std::copy_n(buf.begin(), h.size(), h.begin());
  FrameHeader header;
  return decode_header(h, kMaxHandshakeFrame, header).empty() &&
         static_cast<std::size_t>(n) >= kFrameHeaderSize + header.length;
}

}  // namespace

template <class Acceptor>
asio::awaitable<void> CtrlChannelImpl::accept_loop(Acceptor& acceptor, std::string transport) {
  auto self = shared_from_this();
  for (;;) {
    error_code ec;
    co_await acceptor.async_wait(Acceptor::wait_read, asio::redirect_error(asio::use_awaitable, ec));
    if (closed || !acceptor.is_open() || ec == asio::error::operation_aborted) co_return;
    for (int batch = 1;; ++batch) {
      // A flood must not keep this loop accepting while the handshakes it started wait to run.
      if (batch % 16 == 0) co_await asio::post(ex, asio::use_awaitable);
      if (closed || !acceptor.is_open()) co_return;
      std::string remote;
      socket_type s = accept_one(acceptor, remote, ec);
      if (ec == asio::error::would_block) break;
      if (ec) {
        log().warn("ctrl accept on {} failed: {}", transport, ec.message());
        asio::steady_timer pause(ex, std::chrono::milliseconds(10));  // e.g. out of fds: don't spin
        co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        break;
      }
      admit(std::move(s), transport, remote);
    }
  }
}

std::size_t CtrlChannelImpl::connection_count() const {
  std::size_t n = handshaking.size() + reserved.size();
  for (const auto& [rank, peer] : peers) n += peer->conn ? 1 : 0;
  return n;
}

// Logs refusals at most once a second: a flood must not become a flood of log lines.
void CtrlChannelImpl::note_refusal(const std::string& why) {
  ++counters.refused_busy;
  ++refused;
  const auto now = clock::now();
  if (now - last_refusal_log < std::chrono::seconds(1)) return;
  log().warn("ctrl: refused {} connection(s): {}", refused, why);
  refused = 0;
  last_refusal_log = now;
}

void CtrlChannelImpl::admit(socket_type s, const std::string& transport, const std::string& remote) {
  auto conn = std::make_shared<CtrlConnection>(std::move(s), transport, remote, limits());
  if (transport == "uds" && !opts.uds_any_user) {
    const auto uid = conn->peer_uid();
    if (!uid || *uid != ::geteuid()) {
      ++counters.refused_auth;
      log().error("ctrl: refused a Unix-socket peer of uid {} (this process runs as uid {})",
                  uid ? std::to_string(*uid) : "unknown", ::geteuid());
      conn->close(make_error_code(Status::AUTH_FAILED), "foreign uid");
      return;
    }
  }
  const bool full = connection_count() >= opts.max_connections;
  std::string why;
  if (!handshaking.admits_any())
    why = "no handshakes admitted (max_handshakes " + std::to_string(opts.max_handshakes) + ", per source " +
          std::to_string(opts.max_handshakes_per_source) + ")";
  else if (full && handshaking.size() == 0)  // every connection is an authenticated peer: none is evicted
    why = "too many connections (max_connections " + std::to_string(opts.max_connections) + ")";
  if (!why.empty()) {
    note_refusal(why);
    if (!tls || transport == "uds") {  // a TLS client could not read a plaintext REJECT
      const auto frame = reject_frame(RejectCode::busy, why);
      // One best-effort non-blocking write on a fresh socket, so the client can say why.
      [[maybe_unused]] auto n = ::send(conn->native_handle(), frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    conn->close(make_error_code(Status::NOT_CONNECTED), why);
    return;
  }
  const std::string source = source_of(remote);
  if (auto victim = handshaking.victim(source, full)) {
    const auto n = [](std::size_t v) { return std::to_string(v); };
    evict(victim, handshaking.count(source) >= opts.max_handshakes_per_source
                      ? "too many handshakes from " + source + " (max_handshakes_per_source " +
                            n(opts.max_handshakes_per_source) + ")"
                  : full ? "too many connections (max_connections " + n(opts.max_connections) + ")"
                         : "too many handshakes at once (max_handshakes " + n(opts.max_handshakes) + ")");
  }
  const bool plain = !tls || transport == "uds";
  handshaking.add(conn, source, plain, plain && frame_waiting(conn->native_handle()));
  asio::co_spawn(ex, server_handshake(conn), asio::detached);
}

// Makes room for a newcomer from `source`: the oldest unauthenticated connection goes, with a
// REJECT busy where it can read one, so that a client with the key tries again.
void CtrlChannelImpl::evict(const std::shared_ptr<CtrlConnection>& victim, const std::string& why) {
  const bool answerable = handshaking.answerable(victim);
  handshaking.remove(victim);  // its handshake ends at its next step, without a line of its own
  ++counters.refused_busy;
  handshake_log->warn("ctrl handshake from " + victim->remote() + " evicted for a newer connection: " + why);
  if (!answerable) return victim->close(make_error_code(Status::NOT_CONNECTED), why);
  victim->send(reject_frame(RejectCode::busy, why),
               [victim, why](error_code) { victim->close(make_error_code(Status::NOT_CONNECTED), why); });
}

void CtrlChannelImpl::refuse(const std::shared_ptr<CtrlConnection>& conn, RejectCode code, const std::string& why) {
  ++(code == RejectCode::auth_failed                                   ? counters.refused_auth
     : code == RejectCode::rank_in_use || code == RejectCode::own_rank ? counters.refused_rank
     : code == RejectCode::busy                                        ? counters.refused_busy
     : code == RejectCode::transport                                   ? counters.refused_transport
                                                                       : counters.refused_protocol);
  handshake_log->error("ctrl handshake from " + conn->remote() + " (" + transport_name(*conn) + ") rejected: " + why);
  conn->send(reject_frame(code, code == RejectCode::auth_failed ? "authentication failed" : why),
             [conn, why](error_code) { conn->close(make_error_code(Status::PROTOCOL_ERROR), why); });
}

asio::awaitable<void> CtrlChannelImpl::server_handshake(std::shared_ptr<CtrlConnection> conn) {
  auto self = shared_from_this();
  HandshakeDeadline deadline(ex, clock::now() + opts.hello_timeout);
  deadline.watch(conn, handshake_log,
                 "ctrl handshake from " + conn->remote() + " (" + conn->transport() +
                     ") failed: no complete handshake within " + ms(opts.hello_timeout) + "; closing it");
  // `refusal`: what the failure counts as in stats(); none for a client that just went away.
  auto fail = [&](const std::string& why, std::uint64_t* refusal = nullptr) {
    // Out of the table: evicted or the channel closed; expired: the deadline logged and closed it.
    if (!handshaking.remove(conn) || closed) return;
    if (deadline.expired()) return void(++counters.refused_timeout);
    if (refusal != nullptr) ++*refusal;
    handshake_log->error("ctrl handshake from " + conn->remote() + " (" + transport_name(*conn) + ") failed: " + why +
                         "; closing it");
    conn->close(make_error_code(Status::PROTOCOL_ERROR), why);
  };
  if (tls && conn->transport() == "tcp") {
    const error_code ec = co_await conn->tls_handshake(*tls, asio::ssl::stream_base::server);
    if (ec && peer_spoke_plain_text(ec)) {
      // A plain-text client reads a plain REJECT: one fixed, best-effort frame tells it why.
      const auto frame = reject_frame(RejectCode::auth_failed, kRejectTlsRequired);
      [[maybe_unused]] auto n = ::send(conn->native_handle(), frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      co_return fail(
          std::string("the client spoke plain text: this server uses TLS and the client does not (") + kTlsHint + ")",
          &counters.refused_auth);
    }
    if (ec) co_return fail("TLS handshake: " + ec.message(), &counters.refused_auth);
    handshaking.set_answerable(conn);
  }
  ServerHandshake hs(key, opts.authenticate, random_nonce());
  for (;;) {
    error_code ec;
    std::string problem;
    Frame f = co_await conn->read_frame(ec, problem);
    if (closed || !handshaking.contains(conn)) co_return;  // closed, or evicted for a newer connection
    if (!ec && problem.empty()) handshaking.set_spoke(conn);
    if (deadline.expired()) co_return fail("deadline");  // its shutdown() reads as an EOF
    if (!problem.empty()) {
      handshaking.remove(conn);
      co_return refuse(conn, RejectCode::protocol, problem);
    }
    if (ec) co_return fail("closed before the handshake completed: " + ec.message());
    HandshakeStep step = hs.on_frame(f.header.type, f.payload);
    if (step.what == HandshakeStep::What::reply) {
      conn->send(std::move(step.reply), [](error_code) {});
      continue;
    }
    if (step.what == HandshakeStep::What::failed) {
      handshaking.remove(conn);
      co_return refuse(conn, step.code, step.why);
    }
    break;
  }
  handshaking.remove(conn);
  if (deadline.expired() || !conn->is_open()) co_return fail("closed during the handshake");
  const HelloMsg& hello = hs.hello();
  if ((hello.flags & kHelloUpgrade) != 0) co_return accept_upgrade(conn, hs);
  const std::uint32_t rank = hello.rank == kAnyRank ? assign_rank() : hello.rank;
  if (rank == self_rank.load())
    co_return refuse(conn, RejectCode::own_rank,
                     "HELLO with rank " + std::to_string(rank) + ", this server's own rank");
  if (rank_in_use(rank))
    co_return refuse(conn, RejectCode::rank_in_use,
                     "HELLO with duplicate rank " + std::to_string(rank) + " (already connected)");
  const std::uint8_t plane = hello_plane(hello.flags);
  if (plane != 0) {
    std::string why = handlers.admit_plane ? handlers.admit_plane(plane)
                                           : "this side serves no data transport " + std::to_string(plane);
    if (closed) co_return;
    if (!why.empty()) co_return refuse(conn, RejectCode::transport, why);
  }
  WelcomeMsg w;
  w.server_rank = self_rank.load();
  w.rank = rank;
  w.heartbeat_ms = heartbeat_for(hello.heartbeat_ms, own_heartbeat_ms());
  conn->set_heartbeat_interval(std::chrono::milliseconds(w.heartbeat_ms));
  const bool offer = (hello.flags & kHelloMayUseUds) != 0 && uds_acceptor && uds_acceptor->is_open() &&
                     conn->transport() == "tcp";
  if (offer) {
    w.uds_path = uds_path;
    w.ticket = random_nonce();
  }
  conn->send(hs.welcome(w), [](error_code) {});
  if (!offer) co_return add_peer(rank, conn, plane);

  // The client now either moves to the Unix socket (accept_upgrade claims the rank) or says STAY.
  reserved[rank] = Pending{conn, w.ticket, plane};
  error_code ec;
  std::string problem;
  Frame f = co_await conn->read_frame(ec, problem);
  auto it = reserved.find(rank);
  if (it == reserved.end() || it->second.conn != conn) co_return;  // moved to the Unix socket
  reserved.erase(it);
  if (closed) co_return;
  if (!problem.empty() || ec) {
    log().info("ctrl handshake from {}: the TCP leg ended before the client chose a transport: {}", conn->remote(),
               problem.empty() ? ec.message() : problem);
    co_return conn->close(make_error_code(Status::PEER_LOST), "no STAY");
  }
  if (f.header.type != FrameType::stay)
    co_return refuse(conn, RejectCode::protocol,
                     "expected STAY, got frame type " + std::to_string(static_cast<int>(f.header.type)));
  add_peer(rank, conn, plane);
}

// An authenticated HELLO on the Unix socket quoting the ticket of a pending TCP leg: the Unix
// connection takes that leg's rank and the TCP leg closes.
void CtrlChannelImpl::accept_upgrade(const std::shared_ptr<CtrlConnection>& conn, const ServerHandshake& hs) {
  const HelloMsg& hello = hs.hello();
  auto it = reserved.find(hello.rank);
  if (conn->transport() != "uds" || it == reserved.end() || !macs_equal(it->second.ticket, hello.ticket) ||
      it->second.plane != hello_plane(hello.flags))
    return refuse(conn, RejectCode::bad_ticket,
                  "upgrade HELLO for rank " + std::to_string(hello.rank) + " with no matching TCP connection");
  auto tcp_leg = std::move(it->second.conn);
  const std::uint8_t plane = it->second.plane;
  reserved.erase(it);
  tcp_leg->close(make_error_code(Status::CLOSED), "moved to the Unix socket");
  WelcomeMsg w;
  w.server_rank = self_rank.load();
  w.rank = hello.rank;
  w.heartbeat_ms = heartbeat_for(hello.heartbeat_ms, own_heartbeat_ms());
  conn->set_heartbeat_interval(std::chrono::milliseconds(w.heartbeat_ms));
  conn->send(hs.welcome(w), [](error_code) {});
  add_peer(hello.rank, conn, plane);
}

void CtrlChannelImpl::stop_listening() {
  listening = false;
  error_code ignored;
  // shutdown takes the socket out of LISTEN at once: a connect that comes after close_server() is
  // refused, not queued on a listener whose close waits for its cancelled accept and then reset.
  if (tcp_acceptor && tcp_acceptor->is_open()) ::shutdown(tcp_acceptor->native_handle(), SHUT_RDWR);
  if (tcp_acceptor) tcp_acceptor->close(ignored);
  if (uds_acceptor && uds_acceptor->is_open()) {
    uds_acceptor->close(ignored);
    ::unlink(uds_path.c_str());
  }
}

}  // namespace detail

std::uint16_t CtrlChannel::listen(const std::string& bind_ip, std::uint16_t port) {
  return loop_.call([&]() -> std::uint16_t {
    auto& impl = *impl_;
    if (impl.closed) throw ClosedError("listen on a closed control channel");
    if (impl.tcp_acceptor) throw InvalidArgumentError("control channel is already listening");
    if (impl.self_rank.load() == any_rank) throw InvalidArgumentError("listen: this channel has no rank yet");
    runtime::error_code ec;
    const auto addr = runtime::asio::ip::make_address(bind_ip, ec);
    if (ec) throw InvalidArgumentError("listen: '" + bind_ip + "' is not an IP address");
    detail::tcp::acceptor acc(impl.ex);
    detail::open_tcp_acceptor(acc, detail::tcp::endpoint(addr, port), ec);
    if (ec) throw InvalidConfigError("cannot listen on " + bind_ip + ":" + std::to_string(port) + ": " + ec.message());
    const std::uint16_t bound = acc.local_endpoint().port();
    impl.tcp_acceptor.emplace(std::move(acc));
    impl.listening = true;
    runtime::asio::co_spawn(impl.ex, impl.accept_loop(*impl.tcp_acceptor, "tcp"), runtime::asio::detached);

    if (impl.opts.transport != CtrlTransport::tcp) {
      std::string problem;
      try {
        const auto loc = detail::resolve_uds_location(impl.opts.uds_dir, bound);
        ::unlink(loc.path().c_str());  // a stale socket of ours: only this user can write in loc.dir
        detail::uds::acceptor uacc(impl.ex);
        detail::open_uds_acceptor(uacc, loc.path(), ec);
        if (ec) {
          problem = "cannot listen on Unix socket " + loc.path() + ": " + ec.message();
        } else {
          impl.uds_path = loc.path();
          impl.uds_acceptor.emplace(std::move(uacc));
          runtime::asio::co_spawn(impl.ex, impl.accept_loop(*impl.uds_acceptor, "uds"), runtime::asio::detached);
        }
      } catch (const InvalidConfigError& e) {
        problem = e.what();
      }
      if (!problem.empty()) {
        if (impl.opts.transport == CtrlTransport::uds) {
          impl.stop_listening();
          throw InvalidConfigError(problem);
        }
        runtime::log().warn("ctrl: {}; same-host peers will use TCP", problem);
      }
    }
    runtime::log().info("ctrl rank {} listening on {}:{}{} and {}", impl.self_rank.load(), bind_ip, bound,
                        impl.tls ? " (TLS)" : "", impl.uds_path.empty() ? "no Unix socket" : impl.uds_path);
    return bound;
  });
}

}  // namespace hmc
