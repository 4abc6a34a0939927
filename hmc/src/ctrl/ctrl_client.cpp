// The client side: dialling a server, the client handshake and the move to its Unix socket.
#include "ctrl/ctrl_channel_impl.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "ctrl/ctrl_socket.hpp"
#include "ctrl/local_address.hpp"

namespace hmc::detail {

namespace {

// The status a client sees for the server's REJECT code.
Status status_of_reject(RejectCode code) {
  switch (code) {
    case RejectCode::auth_failed: return Status::AUTH_FAILED;
    case RejectCode::busy: return Status::NOT_CONNECTED;
    case RejectCode::transport: return Status::UNSUPPORT;
    default: return Status::PROTOCOL_ERROR;
  }
}

constexpr const char* kKeyHint = "check auth_key / HMC_AUTH_KEY / HMC_AUTH_KEY_FILE / ~/.hmc/auth_key on both sides";

}  // namespace

// Runs the client handshake on a connected (and, for TLS, secured) connection.
asio::awaitable<CtrlChannelImpl::ClientResult> CtrlChannelImpl::client_handshake(std::shared_ptr<CtrlConnection> conn,
                                                                                 HelloMsg hello) {
  ClientResult r;
  ClientHandshake hs(key, opts.authenticate, hello);
  conn->send(hs.hello_frame(), [](error_code) {});
  for (;;) {
    std::string problem;
    Frame f = co_await conn->read_frame(r.ec, problem);
    if (!problem.empty()) {
      r.ec = make_error_code(Status::PROTOCOL_ERROR);
      r.why = problem;
      co_return r;
    }
    if (r.ec) {
      // Under TLS 1.3 a server that refuses our certificate says so on the first read.
      const bool tls_error = r.ec.category() == asio::error::get_ssl_category();
      r.why = tls_error
                  ? "TLS: " + r.ec.message()
                  : "the server closed the connection during the handshake (" + r.ec.message() + "); its log says why";
      r.ec = make_error_code(tls_error ? Status::AUTH_FAILED : Status::PEER_LOST);
      co_return r;
    }
    HandshakeStep step = hs.on_frame(f.header.type, f.payload);
    if (step.what == HandshakeStep::What::reply) {
      conn->send(std::move(step.reply), [](error_code) {});
      continue;
    }
    if (step.what == HandshakeStep::What::failed) {
      r.ec = make_error_code(hs.rejected()                          ? status_of_reject(step.code)
                             : step.code == RejectCode::auth_failed ? Status::AUTH_FAILED
                                                                    : Status::PROTOCOL_ERROR);
      r.why = step.code == RejectCode::auth_failed ? auth_failure(hs) : step.why;
      r.busy = hs.rejected() == RejectCode::busy;
      co_return r;
    }
    r.welcome = hs.welcome();
    conn->set_heartbeat_interval(std::chrono::milliseconds(heartbeat_for(own_heartbeat_ms(), r.welcome.heartbeat_ms)));
    co_return r;
  }
}

// Why our handshake failed authentication, in words that say what to check: the server's REJECT
// carries only a fixed reason, and its log is on another host.
std::string CtrlChannelImpl::auth_failure(const ClientHandshake& hs) const {
  if (!hs.rejected())
    return "the server could not prove it holds our key: it uses another key or has authentication off (ours is "
           "from " +
           key_origin + "; " + kKeyHint + ")";
  if (hs.rejected_reason() == kRejectTlsRequired)
    return std::string("the server requires TLS and this side does not use it: one side uses TLS and the other "
                       "does not (") +
           kTlsHint + ")";
  if (!opts.authenticate)
    return "the server requires authentication and this side has it off (authenticate = false): turn it on, "
           "with the server's key";
  return "the server rejected our proof of the shared key: the two sides use different keys (ours is from " +
         key_origin + "; " + kKeyHint + ")";
}

asio::awaitable<CtrlChannelImpl::ConnectResult> CtrlChannelImpl::dial(std::string host, std::uint16_t port,
                                                                      Attempt& attempt) {
  ConnectResult r;
  const bool local = is_local_address(host);
  if (opts.transport == CtrlTransport::uds && !local) {
    r.ec = make_error_code(Status::INVALID_CONFIG);
    r.why = "CTRL_TRANSPORT=uds but " + host + " is not an address of this host";
    co_return r;
  }
  const std::string where = host + ":" + std::to_string(port);
  tcp::resolver resolver(ex);
  auto endpoints =
      co_await resolver.async_resolve(host, std::to_string(port), asio::redirect_error(asio::use_awaitable, r.ec));
  if (r.ec) {
    r.why = "cannot resolve " + host + ": " + r.ec.message();
    r.ec = make_error_code(Status::NOT_CONNECTED);
    co_return r;
  }
  std::shared_ptr<CtrlConnection> conn;
  bool saw_refusal = false;
  // A refused connection is retried until the deadline: jobs start their processes together and
  // the server may not listen yet. Backoff 20 ms doubling to 500 ms; nothing else is retried.
  for (auto backoff = std::chrono::milliseconds(20);; backoff = std::min(backoff * 2, std::chrono::milliseconds(500))) {
    for (const auto& entry : endpoints) {
      const tcp::endpoint ep = entry.endpoint();
      socket_type s = open_stream_socket(ex, ep.protocol().family(), r.ec);
      if (r.ec) break;
      auto c = attempt.track(std::make_shared<CtrlConnection>(std::move(s), "tcp", where, limits()));
      r.ec = co_await c->connect(socket_type::endpoint_type(ep));
      if (!r.ec) {
        conn = c;
        break;
      }
      c->close(r.ec, "connect failed");
    }
    if (conn || r.ec != asio::error::connection_refused || closed) break;
    saw_refusal = true;
    if (clock::now() + backoff >= attempt.deadline.when()) break;
    asio::steady_timer pause(ex, backoff);
    co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, r.ec));
    r.ec = asio::error::connection_refused;
  }
  if (!conn) {
    // The deadline may cut the last try short: refusals until then still mean nothing listens.
    r.refused = r.ec == asio::error::connection_refused || (saw_refusal && attempt.deadline.expired());
    if (r.refused) r.ec = asio::error::connection_refused;
    r.why = "cannot connect to " + where + ": " + (r.ec ? r.ec.message() : "no address");
    if (r.refused)
      r.why += " until the timeout of " + ms(attempt.timeout) +
               " (nothing listens there: is the peer running, and is this its control port?)";
    r.ec = make_error_code(Status::NOT_CONNECTED);
    co_return r;
  }
  int one = 1;
  ::setsockopt(conn->native_handle(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (tls) {
    const error_code ec = co_await conn->tls_handshake(*tls, asio::ssl::stream_base::client);
    if (ec) {
      r.ec = make_error_code(attempt.deadline.expired() ? Status::TIMEOUT : Status::AUTH_FAILED);
      r.why = peer_spoke_plain_text(ec)
                  ? std::string("the server answered in plain text, not TLS: this side uses TLS and the server "
                                "does not (") +
                        kTlsHint + ")"
                  : "TLS handshake failed: " + ec.message();
      co_return r;
    }
  }
  const std::uint32_t me = self_rank.load();
  const bool want_uds = opts.transport != CtrlTransport::tcp && local;
  HelloMsg hello;
  hello.rank = me;
  hello.flags = (want_uds ? kHelloMayUseUds : 0) | (std::uint32_t{attempt.plane} << kHelloPlaneShift);
  hello.heartbeat_ms = own_heartbeat_ms();
  hello.nonce = random_nonce();
  ClientResult hs = co_await client_handshake(conn, hello);
  if (hs.ec) {
    r.ec = hs.ec;
    r.why = hs.why;
    r.busy = hs.busy;
    co_return r;
  }
  r.server_rank = hs.welcome.server_rank;
  r.my_rank = hs.welcome.rank;
  if (me != kAnyRank && r.my_rank != me) {
    r.ec = make_error_code(Status::PROTOCOL_ERROR);
    r.why = "the server answered for rank " + std::to_string(r.my_rank) + ", we are " + std::to_string(me);
    co_return r;
  }
  if (hs.welcome.uds_path.empty()) {
    if (opts.transport == CtrlTransport::uds) {
      r.ec = make_error_code(Status::INVALID_CONFIG);
      r.why = "CTRL_TRANSPORT=uds but the server at " + where + " offers no Unix socket";
      co_return r;
    }
    r.conn = conn;
    co_return r;
  }
  std::string why_not;
  auto moved = co_await upgrade(hs.welcome, attempt, why_not);
  if (moved) {
    conn->close(make_error_code(Status::CLOSED), "moved to the Unix socket");
    r.conn = moved;
    co_return r;
  }
  if (opts.transport == CtrlTransport::uds) {
    r.ec = make_error_code(Status::NOT_CONNECTED);
    r.why = "CTRL_TRANSPORT=uds but the Unix socket is unusable: " + why_not;
    co_return r;
  }
  log().warn("ctrl: Unix socket {} of {} unusable ({}); staying on TCP", hs.welcome.uds_path, where, why_not);
  conn->send(encode_frame(FrameType::stay, nullptr, 0), [](error_code) {});
  r.conn = conn;
  co_return r;
}

// The Unix-socket leg: only the path the authenticated server named, only a server of our uid,
// and the key handshake again, quoting the TCP leg's ticket.
asio::awaitable<std::shared_ptr<CtrlConnection>> CtrlChannelImpl::upgrade(const WelcomeMsg& w, Attempt& attempt,
                                                                          std::string& why_not) {
  error_code ec;
  socket_type s = open_stream_socket(ex, AF_UNIX, ec);
  if (ec) {
    why_not = ec.message();
    co_return nullptr;
  }
  auto conn = attempt.track(std::make_shared<CtrlConnection>(std::move(s), "uds", w.uds_path, limits()));
  ec = co_await conn->connect(socket_type::endpoint_type(uds::endpoint(w.uds_path)));
  if (ec) {
    why_not = "connect: " + ec.message();
    co_return nullptr;
  }
  const auto uid = conn->peer_uid();
  if (!opts.uds_any_user && (!uid || *uid != ::geteuid())) {
    why_not = "its owner is uid " + (uid ? std::to_string(*uid) : std::string("unknown")) + ", not ours";
    conn->close(make_error_code(Status::AUTH_FAILED), why_not);
    co_return nullptr;
  }
  HelloMsg hello;
  hello.rank = w.rank;
  hello.flags = kHelloUpgrade | (std::uint32_t{attempt.plane} << kHelloPlaneShift);
  hello.heartbeat_ms = own_heartbeat_ms();
  hello.nonce = random_nonce();
  hello.ticket = w.ticket;
  ClientResult r = co_await client_handshake(conn, hello);
  if (!r.ec && (r.welcome.rank != w.rank || r.welcome.server_rank != w.server_rank || !r.welcome.uds_path.empty())) {
    r.ec = make_error_code(Status::PROTOCOL_ERROR);
    r.why = "the Unix socket answered for other ranks";
  }
  if (r.ec) {
    why_not = r.why;
    conn->close(r.ec, r.why);
    co_return nullptr;
  }
  co_return conn;
}

asio::awaitable<void> CtrlChannelImpl::connect(std::string host, std::uint16_t port, std::chrono::milliseconds timeout,
                                               std::uint8_t plane, CtrlChannel::connect_handler h) {
  auto self = shared_from_this();
  const std::string what = "ctrl connect to " + host + ":" + std::to_string(port);
  Attempt attempt(ex, timeout);
  attempt.plane = plane;
  ConnectResult c = co_await dial(host, port, attempt);
  // A server that refused for load is asked again until the deadline: its handshakes finish, fail
  // or are evicted for newer ones. Backoff 20 ms doubling to 500 ms.
  for (auto backoff = std::chrono::milliseconds(20);
       c.busy && !closed && clock::now() + backoff < attempt.deadline.when();
       backoff = std::min(backoff * 2, std::chrono::milliseconds(500))) {
    for (auto& conn : attempt.conns) conn->close(c.ec, c.why);
    attempt.conns.clear();
    asio::steady_timer pause(ex, backoff);
    error_code ignored;
    co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
    c = co_await dial(host, port, attempt);
  }
  // Refused until the deadline stays NotConnectedError, however late the last refusal came.
  if (attempt.deadline.expired() && !c.refused) {
    c.ec = make_error_code(Status::TIMEOUT);
    c.why = "no answer within " + ms(timeout);
  }
  if (!c.ec && closed) c.ec = make_error_code(Status::CLOSED);
  if (!c.ec && alive(c.server_rank)) {
    c.ec = make_error_code(Status::PROTOCOL_ERROR);
    c.why = "already connected to rank " + std::to_string(c.server_rank);
  }
  if (!c.ec && self_rank.load() == kAnyRank) {
    std::uint32_t expected = kAnyRank;
    self_rank.compare_exchange_strong(expected, c.my_rank);
    log().info("ctrl: rank {} assigned by the server at {}:{}", c.my_rank, host, port);
  }
  if (!c.ec && self_rank.load() != c.my_rank) {
    c.ec = make_error_code(Status::PROTOCOL_ERROR);
    c.why = "this channel became rank " + std::to_string(self_rank.load()) + " while connecting";
  }
  if (c.ec) {
    for (auto& conn : attempt.conns) conn->close(c.ec, c.why);
    complete(std::move(h), c.ec, c.why.empty() ? what : what + ": " + c.why, 0u);
    co_return;
  }
  add_peer(c.server_rank, c.conn, plane);
  complete(std::move(h), error_code{}, what, c.server_rank);
}

}  // namespace hmc::detail
