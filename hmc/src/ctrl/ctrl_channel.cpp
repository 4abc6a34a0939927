#include "hmc/ctrl_channel.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <optional>
#include <set>

#include "ctrl/ctrl_connection.hpp"
#include "ctrl/ctrl_handshake.hpp"
#include "ctrl/ctrl_socket.hpp"
#include "ctrl/ctrl_tls.hpp"
#include "security/handshake_table.hpp"
#include "ctrl/local_address.hpp"
#include "security/throttled_log.hpp"
#include "ctrl/uds_dir.hpp"
#include "hmc/runtime/async_queue.hpp"
#include "hmc/runtime/async_ready_set.hpp"
#include "hmc/runtime/deadline.hpp"
#include "hmc/runtime/log.hpp"
#include "security/auth.hpp"

namespace hmc {
namespace detail {

using runtime::log;
using tcp = asio::ip::tcp;
using uds = asio::local::stream_protocol;
using clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kMessageOverhead = 64;  // inbox cost of a message beyond its payload

std::size_t inbox_cost(const CtrlMessage& m) { return m.bytes().size() + kMessageOverhead; }

std::string ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

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

// The status a client sees for the server's REJECT code.
Status status_of_reject(RejectCode code) {
  switch (code) {
    case RejectCode::auth_failed: return Status::AUTH_FAILED;
    case RejectCode::busy: return Status::NOT_CONNECTED;
    default: return Status::PROTOCOL_ERROR;
  }
}

// Where a user fixes a mismatch, named in the side's own error so that it need not read the peer's log.
constexpr const char* kTlsHint =
    "check tls_cert, tls_key, tls_ca / HMC_TLS_CERT, HMC_TLS_KEY, HMC_TLS_CA on both sides";
constexpr const char* kKeyHint = "check auth_key / HMC_AUTH_KEY / HMC_AUTH_KEY_FILE / ~/.hmc/auth_key on both sides";

// A TLS handshake that met plain text (an HMC frame) instead of a TLS record: the peer has TLS off.
bool peer_spoke_plain_text(const error_code& ec) {
  return ec.category() == asio::error::get_ssl_category() &&
         ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == SSL_R_WRONG_VERSION_NUMBER;
}

// Closes a connection when its handshake runs past the deadline: every pending read or write then
// fails, whatever stage (connect, TLS, frames) it is in.
class HandshakeDeadline {
 public:
  HandshakeDeadline(const runtime::loop_executor& ex, clock::time_point at) : timer_(ex, at) {}
  ~HandshakeDeadline() {
    state_->over = true;  // an expiry already queued must not close a connection that made it
    timer_.cancel();
  }
  // `log_line`: logged to `log` (as an error, before the close the peer sees) when the deadline strikes.
  void watch(const std::shared_ptr<CtrlConnection>& conn, std::shared_ptr<ThrottledLog> log = nullptr,
             std::string log_line = {}) {
    timer_.async_wait([conn, state = state_, log = std::move(log), log_line = std::move(log_line)](error_code ec) {
      if (ec || state->over) return;
      state->expired = true;
      if (log) log->error(log_line);
      conn->close(make_error_code(Status::TIMEOUT), "handshake deadline");
    });
  }
  bool expired() const noexcept { return state_->expired; }
  clock::time_point when() const { return timer_.expiry(); }

 private:
  struct State {
    bool expired = false;
    bool over = false;
  };
  asio::steady_timer timer_;
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace

class CtrlChannelImpl : public std::enable_shared_from_this<CtrlChannelImpl> {
 public:
  CtrlChannelImpl(runtime::EventLoop& l, std::uint32_t rank, CtrlOptions o)
      : loop(l), ex(l.executor()), self_rank(rank), opts(std::move(o)), connected(ex) {
    if (opts.authenticate) {
      AuthKeyOrigin origin;
      key = resolve_auth_key(opts.auth_key, &origin);
      key_origin = origin.description;
      log().debug("ctrl: peers authenticate with the key from {}", origin.description);
    } else {
      log().warn("ctrl: peer authentication is OFF (authenticate = false): any process that reaches the control "
                 "port can read and write this session's memory");
    }
    tls = make_tls_context(opts);
  }

  struct Peer {
    Peer(runtime::loop_executor e, std::shared_ptr<std::size_t> total) : inbox(e), inbox_total(std::move(total)) {}
    Peer(const Peer&) = delete;
    Peer& operator=(const Peer&) = delete;
    // Whatever it still holds leaves the total with it, however the peer goes.
    ~Peer() { *inbox_total -= std::min(*inbox_total, inbox_bytes); }
    std::shared_ptr<CtrlConnection> conn;  // null before the rank first connected and after it is lost
    runtime::AsyncQueue<CtrlMessage> inbox;
    std::shared_ptr<std::size_t> inbox_total;  // the channel's sum of inbox_bytes, for total_inbox_budget
    std::size_t inbox_bytes = 0;  // what inbox holds (or hands to a waiter), for inbox_budget
    bool ever_connected = false;  // false: a placeholder made by a receive that waits for the rank
    std::string lost_why;         // how the last connection ended
  };

  // A TCP leg that was offered the Unix socket: it holds its rank until the client moves or stays.
  struct Pending {
    std::shared_ptr<CtrlConnection> conn;
    Nonce ticket;
  };

  struct ConnectResult {
    error_code ec;
    std::string why;
    std::shared_ptr<CtrlConnection> conn;
    std::uint32_t server_rank = 0;
    std::uint32_t my_rank = 0;
    bool busy = false;  // the server refused for load (REJECT busy): worth asking again
  };

  // The result of a client handshake on one connection.
  struct ClientResult {
    error_code ec;
    std::string why;
    WelcomeMsg welcome;
    bool busy = false;
  };

  // Completes an HMC operation: the error code becomes the typed exception here, nowhere else.
  template <class Sig, class... Args>
  void complete(asio::any_completion_handler<Sig> h, error_code ec, const std::string& context, Args&&... args) {
    runtime::complete_later(ex, std::move(h), ec ? make_error(ec, context) : nullptr, std::forward<Args>(args)...);
  }

  ConnectionLimits limits() const {
    return ConnectionLimits{opts.max_frame_length, opts.send_timeout, opts.heartbeat_interval, opts.heartbeat_misses,
                            opts.partial_frame_timeout};
  }

  bool alive(std::uint32_t rank) const {
    auto it = peers.find(rank);
    return it != peers.end() && it->second->conn && it->second->conn->is_open();
  }

  bool rank_in_use(std::uint32_t rank) const { return alive(rank) || reserved.count(rank) != 0; }

  std::size_t connection_count() const {
    std::size_t n = handshaking.size() + reserved.size();
    for (const auto& [rank, peer] : peers) n += peer->conn ? 1 : 0;
    return n;
  }

  // Ranks handed to "any" clients: 1, 2, ... in connection order, skipping ranks in use.
  std::uint32_t assign_rank() {
    while (next_assign == self_rank.load() || next_assign == kAnyRank || rank_in_use(next_assign)) ++next_assign;
    return next_assign++;
  }

  void push_message(const std::shared_ptr<Peer>& p, CtrlMessage m) {
    const std::size_t cost = inbox_cost(m);
    p->inbox_bytes += cost;
    *inbox_total += cost;
    p->inbox.push(std::move(m));
    if (p->conn && holds_more_than(*p, 1)) p->conn->pause_reading();
  }

  // Over its own budget, or, while all inboxes together are over theirs, over an even share of
  // it: a peer whose messages are being received keeps flowing while the hoarders wait. `fraction`
  // 2 asks the same of half the budgets (where reading resumes).
  bool holds_more_than(const Peer& p, std::size_t fraction) const {
    if (p.inbox_bytes > opts.inbox_budget / fraction) return true;
    const std::size_t share = opts.total_inbox_budget / std::max<std::size_t>(1, peers.size());
    return *inbox_total > opts.total_inbox_budget / fraction && p.inbox_bytes > share / fraction;
  }

  // After a receive took `cost` bytes from p's inbox.
  void drained(Peer& p, std::size_t cost) {
    const bool total_was_over = *inbox_total > opts.total_inbox_budget / 2;
    p.inbox_bytes -= std::min(p.inbox_bytes, cost);
    *inbox_total -= std::min(*inbox_total, cost);
    if (p.conn && !holds_more_than(p, 2)) p.conn->resume_reading();
    if (!total_was_over || *inbox_total > opts.total_inbox_budget / 2) return;
    // The total fell to half: peers paused for their share only may read again.
    for (const auto& [rank, other] : peers)
      if (other->conn && !holds_more_than(*other, 2)) other->conn->resume_reading();
  }

  std::shared_ptr<Peer> new_peer() { return std::make_shared<Peer>(ex, inbox_total); }

  void add_peer(std::uint32_t rank, const std::shared_ptr<CtrlConnection>& conn) {
    auto& slot = peers[rank];
    // A rank that reconnects after a loss starts with a fresh inbox; a waiting receive's placeholder is kept.
    if (!slot || slot->ever_connected) slot = new_peer();
    slot->conn = conn;
    slot->ever_connected = true;
    std::weak_ptr<Peer> weak_peer = slot;
    std::weak_ptr<CtrlChannelImpl> weak_self = weak_from_this();
    conn->start(
        [weak_peer, weak_self, rank](CtrlMessage m) {
          auto p = weak_peer.lock();
          auto self = weak_self.lock();
          if (!p || !self) return;
          if (m.kind() != CtrlKind::transport) {
            self->push_message(p, std::move(m));
          } else if (self->handlers.on_transport) {
            self->handlers.on_transport(rank, std::move(m));
          }
        },
        [weak_peer, weak_self, conn_raw = conn.get(), rank](error_code, const std::string& why) {
          auto p = weak_peer.lock();
          if (!p || p->conn.get() != conn_raw) return;
          log().info("ctrl peer rank {} lost: {}", rank, why);
          p->lost_why = why;
          p->conn.reset();
          p->inbox.close(make_error_code(Status::PEER_LOST));
          auto self = weak_self.lock();
          if (!self) return;
          self->connected.reset(rank);
          self->forget_old_losses(rank);
          if (self->handlers.on_peer) self->handlers.on_peer(rank, false);
        });
    log().info("ctrl peer rank {} connected over {} ({})", rank, transport_name(*conn), conn->remote());
    if (handlers.on_peer) handlers.on_peer(rank, true);
    connected.set(rank);
  }

  // A lost peer's entry answers later receives with PeerLostError. Ranks handed to "any" clients
  // are never reused, so only the newest max_connections losses are remembered (drained ones).
  void forget_old_losses(std::uint32_t just_lost) {
    losses.push_back(just_lost);
    while (losses.size() > opts.max_connections) {
      auto it = peers.find(losses.front());
      losses.pop_front();
      if (it != peers.end() && !it->second->conn && it->second->inbox.size() == 0 && it->second->inbox.waiters() == 0)
        peers.erase(it);
    }
  }

  static std::string transport_name(const CtrlConnection& c) { return c.is_tls() ? "tls" : c.transport(); }

  std::uint32_t own_heartbeat_ms() const {
    return static_cast<std::uint32_t>(std::clamp<std::int64_t>(opts.heartbeat_interval.count(), 0, 0xFFFFFFFF));
  }

  // ---- server side ----

  template <class Acceptor>
  asio::awaitable<void> accept_loop(Acceptor& acceptor, std::string transport) {
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

  // Logs refusals at most once a second: a flood must not become a flood of log lines.
  void note_refusal(const std::string& why) {
    ++refused;
    const auto now = clock::now();
    if (now - last_refusal_log < std::chrono::seconds(1)) return;
    log().warn("ctrl: refused {} connection(s): {}", refused, why);
    refused = 0;
    last_refusal_log = now;
  }

  void admit(socket_type s, const std::string& transport, const std::string& remote) {
    auto conn = std::make_shared<CtrlConnection>(std::move(s), transport, remote, limits());
    if (transport == "uds" && !opts.uds_any_user) {
      const auto uid = conn->peer_uid();
      if (!uid || *uid != ::geteuid()) {
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
  void evict(const std::shared_ptr<CtrlConnection>& victim, const std::string& why) {
    const bool answerable = handshaking.answerable(victim);
    handshaking.remove(victim);  // its handshake ends at its next step, without a line of its own
    handshake_log->warn("ctrl handshake from " + victim->remote() + " evicted for a newer connection: " + why);
    if (!answerable) return victim->close(make_error_code(Status::NOT_CONNECTED), why);
    victim->send(reject_frame(RejectCode::busy, why),
                 [victim, why](error_code) { victim->close(make_error_code(Status::NOT_CONNECTED), why); });
  }

  void refuse(const std::shared_ptr<CtrlConnection>& conn, RejectCode code, const std::string& why) {
    handshake_log->error("ctrl handshake from " + conn->remote() + " (" + transport_name(*conn) + ") rejected: " + why);
    conn->send(reject_frame(code, code == RejectCode::auth_failed ? "authentication failed" : why), [conn, why](error_code) {
      conn->close(make_error_code(Status::PROTOCOL_ERROR), why);
    });
  }

  asio::awaitable<void> server_handshake(std::shared_ptr<CtrlConnection> conn) {
    auto self = shared_from_this();
    HandshakeDeadline deadline(ex, clock::now() + opts.hello_timeout);
    deadline.watch(conn, handshake_log,
                   "ctrl handshake from " + conn->remote() + " (" + conn->transport() +
                       ") failed: no complete handshake within " + ms(opts.hello_timeout) + "; closing it");
    auto fail = [&](const std::string& why) {
      // Out of the table: evicted or the channel closed; expired: the deadline logged and closed it.
      if (!handshaking.remove(conn) || closed || deadline.expired()) return;
      handshake_log->error("ctrl handshake from " + conn->remote() + " (" + transport_name(*conn) + ") failed: " + why +
                           "; closing it");
      conn->close(make_error_code(Status::PROTOCOL_ERROR), why);
    };
    if (tls && conn->transport() == "tcp") {
      const error_code ec = co_await conn->tls_handshake(*tls, asio::ssl::stream_base::server);
      if (ec && peer_spoke_plain_text(ec)) {
        // A plain-text client reads a plain REJECT: one fixed, best-effort frame tells it why.
        const auto frame = reject_frame(RejectCode::auth_failed, kRejectTlsRequired);
        [[maybe_unused]] auto n =
            ::send(conn->native_handle(), frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        co_return fail(std::string("the client spoke plain text: this server uses TLS and the client does not (") +
                       kTlsHint + ")");
      }
      if (ec) co_return fail("TLS handshake: " + ec.message());
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
    if (!offer) co_return add_peer(rank, conn);

    // The client now either moves to the Unix socket (accept_upgrade claims the rank) or says STAY.
    reserved[rank] = Pending{conn, w.ticket};
    error_code ec;
    std::string problem;
    Frame f = co_await conn->read_frame(ec, problem);
    auto it = reserved.find(rank);
    if (it == reserved.end() || it->second.conn != conn) co_return;  // moved to the Unix socket
    reserved.erase(it);
    if (closed) co_return;
    if (!problem.empty() || ec) {
      log().info("ctrl handshake from {}: the TCP leg ended before the client chose a transport: {}",
                 conn->remote(), problem.empty() ? ec.message() : problem);
      co_return conn->close(make_error_code(Status::PEER_LOST), "no STAY");
    }
    if (f.header.type != FrameType::stay)
      co_return refuse(conn, RejectCode::protocol,
                       "expected STAY, got frame type " + std::to_string(static_cast<int>(f.header.type)));
    add_peer(rank, conn);
  }

  // An authenticated HELLO on the Unix socket quoting the ticket of a pending TCP leg: the Unix
  // connection takes that leg's rank and the TCP leg closes.
  void accept_upgrade(const std::shared_ptr<CtrlConnection>& conn, const ServerHandshake& hs) {
    const HelloMsg& hello = hs.hello();
    auto it = reserved.find(hello.rank);
    if (conn->transport() != "uds" || it == reserved.end() || !macs_equal(it->second.ticket, hello.ticket))
      return refuse(conn, RejectCode::bad_ticket,
                    "upgrade HELLO for rank " + std::to_string(hello.rank) + " with no matching TCP connection");
    auto tcp_leg = std::move(it->second.conn);
    reserved.erase(it);
    tcp_leg->close(make_error_code(Status::CLOSED), "moved to the Unix socket");
    WelcomeMsg w;
    w.server_rank = self_rank.load();
    w.rank = hello.rank;
    w.heartbeat_ms = heartbeat_for(hello.heartbeat_ms, own_heartbeat_ms());
    conn->set_heartbeat_interval(std::chrono::milliseconds(w.heartbeat_ms));
    conn->send(hs.welcome(w), [](error_code) {});
    add_peer(hello.rank, conn);
  }

  // ---- client side ----

  // Runs the client handshake on a connected (and, for TLS, secured) connection.
  asio::awaitable<ClientResult> client_handshake(std::shared_ptr<CtrlConnection> conn, HelloMsg hello) {
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
        r.why = tls_error ? "TLS: " + r.ec.message()
                          : "the server closed the connection during the handshake (" + r.ec.message() +
                                "); its log says why";
        r.ec = make_error_code(tls_error ? Status::AUTH_FAILED : Status::PEER_LOST);
        co_return r;
      }
      HandshakeStep step = hs.on_frame(f.header.type, f.payload);
      if (step.what == HandshakeStep::What::reply) {
        conn->send(std::move(step.reply), [](error_code) {});
        continue;
      }
      if (step.what == HandshakeStep::What::failed) {
        r.ec = make_error_code(hs.rejected() ? status_of_reject(step.code)
                               : step.code == RejectCode::auth_failed ? Status::AUTH_FAILED
                                                                      : Status::PROTOCOL_ERROR);
        r.why = step.code == RejectCode::auth_failed ? auth_failure(hs) : step.why;
        r.busy = hs.rejected() == RejectCode::busy;
        co_return r;
      }
      r.welcome = hs.welcome();
      conn->set_heartbeat_interval(
          std::chrono::milliseconds(heartbeat_for(own_heartbeat_ms(), r.welcome.heartbeat_ms)));
      co_return r;
    }
  }

  // Why our handshake failed authentication, in words that say what to check: the server's REJECT
  // carries only a fixed reason, and its log is on another host.
  std::string auth_failure(const ClientHandshake& hs) const {
    if (!hs.rejected())
      return "the server could not prove it holds our key: it uses another key or has authentication off (ours is "
             "from " + key_origin + "; " + kKeyHint + ")";
    if (hs.rejected_reason() == kRejectTlsRequired)
      return std::string("the server requires TLS and this side does not use it: one side uses TLS and the other "
                         "does not (") + kTlsHint + ")";
    if (!opts.authenticate)
      return "the server requires authentication and this side has it off (authenticate = false): turn it on, "
             "with the server's key";
    return "the server rejected our proof of the shared key: the two sides use different keys (ours is from " +
           key_origin + "; " + kKeyHint + ")";
  }

  // Every connection an attempt opened, so that the deadline can close them whatever they wait on.
  struct Attempt {
    Attempt(const runtime::loop_executor& e, std::chrono::milliseconds t)
        : deadline(e, runtime::deadline_after(t)), timeout(t) {}
    HandshakeDeadline deadline;
    std::chrono::milliseconds timeout;  // what `deadline` is after the start, for messages
    std::shared_ptr<CtrlConnection> track(std::shared_ptr<CtrlConnection> c) {
      deadline.watch(c);
      conns.push_back(c);
      return c;
    }
    std::vector<std::shared_ptr<CtrlConnection>> conns;
  };

  asio::awaitable<ConnectResult> dial(std::string host, std::uint16_t port, Attempt& attempt) {
    ConnectResult r;
    const bool local = is_local_address(host);
    if (opts.transport == CtrlTransport::uds && !local) {
      r.ec = make_error_code(Status::INVALID_CONFIG);
      r.why = "CTRL_TRANSPORT=uds but " + host + " is not an address of this host";
      co_return r;
    }
    const std::string where = host + ":" + std::to_string(port);
    tcp::resolver resolver(ex);
    auto endpoints = co_await resolver.async_resolve(host, std::to_string(port),
                                                     asio::redirect_error(asio::use_awaitable, r.ec));
    if (r.ec) {
      r.why = "cannot resolve " + host + ": " + r.ec.message();
      r.ec = make_error_code(Status::NOT_CONNECTED);
      co_return r;
    }
    std::shared_ptr<CtrlConnection> conn;
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
      if (clock::now() + backoff >= attempt.deadline.when()) break;
      asio::steady_timer pause(ex, backoff);
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, r.ec));
      r.ec = asio::error::connection_refused;
    }
    if (!conn) {
      r.why = "cannot connect to " + where + ": " + (r.ec ? r.ec.message() : "no address");
      if (r.ec == asio::error::connection_refused)
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
                                  "does not (") + kTlsHint + ")"
                    : "TLS handshake failed: " + ec.message();
        co_return r;
      }
    }
    const std::uint32_t me = self_rank.load();
    const bool want_uds = opts.transport != CtrlTransport::tcp && local;
    HelloMsg hello;
    hello.rank = me;
    hello.flags = want_uds ? kHelloMayUseUds : 0;
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
  asio::awaitable<std::shared_ptr<CtrlConnection>> upgrade(const WelcomeMsg& w, Attempt& attempt,
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
    hello.flags = kHelloUpgrade;
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

  asio::awaitable<void> connect(std::string host, std::uint16_t port, std::chrono::milliseconds timeout,
                                CtrlChannel::connect_handler h) {
    auto self = shared_from_this();
    const std::string what = "ctrl connect to " + host + ":" + std::to_string(port);
    Attempt attempt(ex, timeout);
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
    if (attempt.deadline.expired()) {
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
    add_peer(c.server_rank, c.conn);
    complete(std::move(h), error_code{}, what, c.server_rank);
  }

  void stop_listening() {
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

  void close_all() {
    if (closed) return;
    closed = true;
    stop_listening();
    std::vector<std::shared_ptr<CtrlConnection>> pending;
    handshaking.for_each([&](const auto& c) { pending.push_back(c); });
    handshaking.clear();
    for (const auto& c : pending) c->close(make_error_code(Status::CLOSED), "channel closed");
    handshake_log->flush();
    for (auto& [rank, p] : std::map<std::uint32_t, Pending>(reserved))
      p.conn->close(make_error_code(Status::CLOSED), "channel closed");
    reserved.clear();
    for (auto& [rank, peer] : peers) {
      if (peer->conn) peer->conn->close(make_error_code(Status::CLOSED), "channel closed");
      if (!peer->ever_connected) peer->inbox.close(make_error_code(Status::CLOSED));
    }
    connected.close(make_error_code(Status::CLOSED));
  }

  runtime::EventLoop& loop;
  runtime::loop_executor ex;
  CtrlHandlers handlers;
  std::atomic<std::uint32_t> self_rank;  // read from any thread by rank()
  const CtrlOptions opts;
  AuthKey key;
  std::string key_origin;  // where `key` came from, for a client's "different keys" error
  std::unique_ptr<asio::ssl::context> tls;
  std::shared_ptr<std::size_t> inbox_total = std::make_shared<std::size_t>(0);
  std::map<std::uint32_t, std::shared_ptr<Peer>> peers;
  runtime::AsyncReadySet<std::uint32_t> connected;  // ranks with a live connection, for async_wait_peer
  HandshakeTable<CtrlConnection> handshaking{opts.max_handshakes, opts.max_handshakes_per_source};
  std::shared_ptr<ThrottledLog> handshake_log = std::make_shared<ThrottledLog>(ex, "ctrl");
  std::map<std::uint32_t, Pending> reserved;
  std::deque<std::uint32_t> losses;  // ranks in the order they were lost, for forget_old_losses
  std::uint32_t next_assign = 1;
  std::optional<tcp::acceptor> tcp_acceptor;
  std::optional<uds::acceptor> uds_acceptor;
  std::string uds_path;
  bool listening = false;
  bool closed = false;
  std::size_t refused = 0;
  clock::time_point last_refusal_log{};
};

}  // namespace detail

CtrlChannel::CtrlChannel(runtime::EventLoop& loop, std::uint32_t self_rank, CtrlOptions options)
    : loop_(loop), impl_(std::make_shared<detail::CtrlChannelImpl>(loop, self_rank, std::move(options))) {}

CtrlChannel::~CtrlChannel() { close(); }

std::uint32_t CtrlChannel::rank() const noexcept { return impl_->self_rank.load(); }

void CtrlChannel::set_handlers(CtrlHandlers handlers) {
  loop_.call([&] { impl_->handlers = std::move(handlers); });
}

runtime::loop_executor CtrlChannel::executor() const noexcept { return impl_->ex; }

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
    if (ec)
      throw InvalidConfigError("cannot listen on " + bind_ip + ":" + std::to_string(port) + ": " + ec.message());
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

void CtrlChannel::stop_listening() {
  loop_.call([&] { impl_->stop_listening(); });
}

bool CtrlChannel::deliver(std::uint32_t rank, CtrlMessage message) {
  return loop_.call([&] {
    if (!impl_->alive(rank)) return true;
    const auto& p = impl_->peers.at(rank);
    const std::size_t cost = detail::inbox_cost(message);
    if (p->inbox_bytes + cost > 2 * impl_->opts.inbox_budget ||
        *impl_->inbox_total + cost > 2 * impl_->opts.total_inbox_budget)
      return false;
    impl_->push_message(p, std::move(message));
    return true;
  });
}

std::string CtrlChannel::uds_path() const {
  return loop_.call([&] { return impl_->uds_acceptor && impl_->uds_acceptor->is_open() ? impl_->uds_path : ""; });
}

std::vector<std::uint32_t> CtrlChannel::peers() const {
  return loop_.call([&] {
    std::vector<std::uint32_t> out;
    for (const auto& [rank, peer] : impl_->peers)
      if (impl_->alive(rank)) out.push_back(rank);
    return out;
  });
}

std::string CtrlChannel::lost_reason(std::uint32_t rank) const {
  return loop_.call([&]() -> std::string {
    auto it = impl_->peers.find(rank);
    return it == impl_->peers.end() || impl_->alive(rank) ? "" : it->second->lost_why;
  });
}

std::string CtrlChannel::transport_of(std::uint32_t rank) const {
  return loop_.call([&] {
    if (!impl_->alive(rank)) throw NotConnectedError("no control connection to rank " + std::to_string(rank));
    return detail::CtrlChannelImpl::transport_name(*impl_->peers.at(rank)->conn);
  });
}

std::string CtrlChannel::remote_host(std::uint32_t rank) const {
  return loop_.call([&]() -> std::string {
    if (!impl_->alive(rank)) return {};
    const detail::CtrlConnection& conn = *impl_->peers.at(rank)->conn;
    if (conn.transport() != "tcp") return {};
    std::string host = detail::source_of(conn.remote());
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    return host;
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
  if (it == impl->peers.end() || !it->second->ever_connected)
    return impl->complete(std::move(h), make_error_code(Status::NOT_CONNECTED), what);
  if (!impl->alive(rank))
    return impl->complete(std::move(h), make_error_code(Status::PEER_LOST),
                          what + " (its connection ended: " + it->second->lost_why + ")");
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
  auto& slot_ref = impl->peers[rank];
  if (!slot_ref) slot_ref = impl->new_peer();  // wait for rank to connect
  std::weak_ptr<detail::CtrlChannelImpl::Peer> weak_peer = slot_ref;
  auto slot = runtime::asio::get_associated_cancellation_slot(h);
  slot_ref->inbox.async_pop(
      timeout,
      runtime::asio::bind_cancellation_slot(
          slot, [impl, weak_peer, rank, what, h = std::move(h)](runtime::error_code ec, CtrlMessage msg) mutable {
            std::string context = what;
            if (auto p = weak_peer.lock()) {
              if (!ec) {
                impl->drained(*p, detail::inbox_cost(msg));
              } else if (ec == make_error_code(Status::PEER_LOST) && !p->lost_why.empty()) {
                context += " (its connection ended: " + p->lost_why + ")";
              } else if (!p->ever_connected) {
                if (ec == runtime::asio::error::timed_out) context += " (rank " + std::to_string(rank) + " never connected)";
                auto it = impl->peers.find(rank);
                if (p->inbox.waiters() == 0 && it != impl->peers.end() && it->second == p) impl->peers.erase(it);
              }
            }
            impl->complete(std::move(h), ec, context, std::move(msg));
          }));
}

}  // namespace hmc
