#include "hmc/store/store_server.hpp"

#include <sys/resource.h>
#include <sys/socket.h>

#include <array>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <charconv>
#include <limits>
#include <set>
#include <unordered_map>

#include "hmc/error.hpp"
#include "hmc/runtime/log.hpp"
#include "security/handshake_table.hpp"
#include "security/throttled_log.hpp"
#include "security/tls_context.hpp"
#include "store/store_handshake.hpp"
#include "store/store_stream.hpp"

namespace hmc {
namespace detail {

namespace asio = runtime::asio;
namespace wire = store_wire;
using runtime::log;
using tcp = asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;

namespace {

// Counters are decimal strings (as torch's stores keep them); anything else is not a counter.
bool parse_counter(const std::string& s, std::int64_t& out) {
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && end == s.data() + s.size();
}

std::string key_list(const std::vector<std::string>& keys) {
  std::string out;
  for (std::size_t i = 0; i < keys.size() && i < 4; ++i) out += (i ? ", " : "") + keys[i];
  if (keys.size() > 4) out += ", ... (" + std::to_string(keys.size()) + " keys)";
  return out;
}

// Whether a whole well-formed handshake frame already waits on a fresh socket (peeked, not read).
bool frame_waiting(int fd) {
  constexpr std::uint32_t kMaxHandshakeFrame = 256;
  std::array<std::byte, wire::kHeaderSize + kMaxHandshakeFrame> buf;
  const ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_PEEK | MSG_DONTWAIT);
  if (n < static_cast<ssize_t>(wire::kHeaderSize)) return false;
  wire::Header h;
  const std::span<const std::byte> header(buf.data(), wire::kHeaderSize);
  return wire::decode_header(header, kMaxHandshakeFrame, h).empty() &&
         static_cast<std::size_t>(n) >= wire::kHeaderSize + h.length;
}

}  // namespace

class StoreServerImpl : public std::enable_shared_from_this<StoreServerImpl> {
 public:
  StoreServerImpl(runtime::loop_executor e, StoreServerOptions o) : ex(e), opts(std::move(o)) {
    limits.max_value = opts.max_value_size;
    if (opts.authenticate) key = resolve_auth_key(opts.auth_key, nullptr, "StoreServerOptions::auth_key");
    tls = make_tls_context(opts.tls, "store TLS (StoreServerOptions::tls)");
  }

  struct Conn;
  struct Waiter {
    std::weak_ptr<Conn> conn;
    std::uint32_t id = 0;
    wire::Request request;
    std::optional<asio::steady_timer> timer;
    bool done = false;
  };
  struct Conn {
    std::shared_ptr<StoreStream> stream;
    std::set<std::shared_ptr<Waiter>> waiters;
    std::string remote;
  };

  // -- accepting ---------------------------------------------------------------------------------
  asio::awaitable<void> accept_loop() {
    auto self = shared_from_this();
    for (;;) {
      runtime::error_code ec;
      tcp::socket s = co_await acceptor->async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (closed || ec == asio::error::operation_aborted) co_return;
      if (ec) {
        log().warn("store accept failed: {}", ec.message());
        asio::steady_timer pause(ex, std::chrono::milliseconds(10));  // e.g. out of fds: don't spin
        co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        continue;
      }
      // Descriptors are handed out lowest first: a high one means the table is nearly full, and
      // the rest is kept for the process's other sockets (a Session's control channel, UCX).
      if (s.native_handle() >= fd_ceiling()) {
        handshake_log->warn("store: refusing a connection, file descriptor " + std::to_string(s.native_handle()) +
                            " is within " + std::to_string(fd_headroom()) +
                            " of this process's limit (ulimit -n) kept for its other connections");
        s.close(ec);
        continue;
      }
      const bool full = conns.size() >= opts.max_connections;
      if (!handshaking.admits_any() || (full && handshaking.size() == 0)) {  // authenticated clients are never evicted
        handshake_log->warn("store: refusing a connection, " + std::to_string(conns.size()) +
                            " are open (max_connections " + std::to_string(opts.max_connections) + ", max_handshakes " +
                            std::to_string(opts.max_handshakes) + ")");
        s.close(ec);
        continue;
      }
      s.set_option(tcp::no_delay(true), ec);
      auto conn = std::make_shared<Conn>();
      auto ep = s.remote_endpoint(ec);
      conn->remote = ec ? "?" : ep.address().to_string() + ":" + std::to_string(ep.port());
      // Replies queued for a client that stops reading: a few maximal values, then it is cut off.
      conn->stream = std::make_shared<StoreStream>(std::move(s), 4 * opts.max_value_size + (1u << 20), reply_budget);
      const std::string source = source_of(conn->remote);
      if (auto victim = handshaking.victim(source, full)) evict(victim, source, full);
      // Under TLS the first bytes are the TLS hello, not a frame of ours.
      handshaking.add(conn, source, false, !tls && frame_waiting(conn->stream->socket().native_handle()));
      conns.insert(conn);
      asio::co_spawn(ex, serve(conn), asio::detached);
    }
  }

  // Of RLIMIT_NOFILE, what the store leaves to the rest of the process: an eighth, at least 64.
  static int fd_headroom() {
    rlimit r{};
    if (::getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return 64;
    return static_cast<int>(std::max<rlim_t>(64, r.rlim_cur / 8));
  }
  static int fd_ceiling() {
    rlimit r{};
    if (::getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return std::numeric_limits<int>::max();
    const auto cur = static_cast<long long>(std::min<rlim_t>(r.rlim_cur, std::numeric_limits<int>::max()));
    return static_cast<int>(std::max<long long>(0, cur - fd_headroom()));
  }

  // Makes room for a newcomer from `source`: the oldest connection still in its handshake is
  // closed (a client tries again until its own timeout).
  void evict(const std::shared_ptr<Conn>& victim, const std::string& source, bool full) {
    const auto n = [](std::size_t v) { return std::to_string(v); };
    const std::string why = handshaking.count(source) >= opts.max_handshakes_per_source
                                ? "too many handshakes from " + source + " (max_handshakes_per_source " +
                                      n(opts.max_handshakes_per_source) + ")"
                            : full ? "too many connections (max_connections " + n(opts.max_connections) + ")"
                                   : "too many handshakes at once (max_handshakes " + n(opts.max_handshakes) + ")";
    handshaking.remove(victim);  // its serve() then ends without a line of its own
    handshake_log->warn("store: connection from " + victim->remote + " evicted for a newer one: " + why);
    victim->stream->close();
  }

  // -- one connection ------------------------------------------------------------------------------
  asio::awaitable<void> serve(std::shared_ptr<Conn> conn) {
    auto self = shared_from_this();
    asio::steady_timer deadline(ex, opts.handshake_timeout);
    auto hs = co_await (handshake(conn) || deadline.async_wait(asio::use_awaitable));
    std::string why = hs.index() == 1 ? "no handshake within " + std::to_string(opts.handshake_timeout.count()) + " ms"
                                      : std::get<0>(hs);
    if (!why.empty()) {
      // Out of the table already: evicted (or the server closed), nothing to say.
      if (handshaking.remove(conn) && !closed)
        handshake_log->warn("store: closing connection from " + conn->remote + ": " + why);
      co_return drop(conn);
    }
    while (why.empty() && !closed) {
      wire::Header h;
      std::vector<std::byte> payload;
      bool clean = false;
      why = co_await conn->stream->read(limits.max_frame(), opts.frame_timeout, h, payload, &clean);
      if (!why.empty()) {
        if (clean) why.clear();
        break;
      }
      if (h.type != wire::FrameType::request) {
        why = "frame type " + std::to_string(static_cast<int>(h.type)) + " after the handshake";
        break;
      }
      wire::Request request;
      // The frame itself was sound: refuse the request, keep the connection.
      if (auto bad = wire::decode_request(payload, limits, request); !bad.empty()) {
        reply(conn, h.id, fail(Status::INVALID_ARGUMENT, "malformed request: " + bad));
        continue;
      }
      handle(conn, h.id, std::move(request));
    }
    if (!why.empty() && !closed) log().warn("store: closing connection from {}: {}", conn->remote, why);
    drop(conn);
  }

  asio::awaitable<std::string> handshake(const std::shared_ptr<Conn>& conn) {
    if (tls) {
      // A client without TLS sends a HELLO of ours: it is told why in clear instead of an alert it cannot read.
      runtime::error_code ec;
      co_await conn->stream->socket().async_wait(tcp::socket::wait_read, asio::redirect_error(asio::use_awaitable, ec));
      if (!ec && frame_waiting(conn->stream->socket().native_handle())) {
        const std::string reason = "this store requires TLS (StoreOptions::tls)";
        conn->stream->write(wire::encode_frame(wire::FrameType::reject, 0, wire::bytes_of(reason)));
        co_return "a client without TLS: " + reason;
      }
      ec = co_await conn->stream->tls_handshake(*tls, asio::ssl::stream_base::server);
      if (ec) co_return "TLS handshake: " + ec.message();
    }
    wire::Header h;
    std::vector<std::byte> p;
    if (auto why = co_await conn->stream->read(256, opts.handshake_timeout, h, p); !why.empty()) co_return why;
    if (h.type != wire::FrameType::hello || p.size() != kStoreHelloSize) co_return "expected a HELLO frame";
    handshaking.set_spoke(conn);
    Nonce client_nonce{}, server_nonce{};
    std::copy_n(p.begin(), client_nonce.size(), client_nonce.begin());
    const bool wants_auth = p[32] != std::byte{0};
    if (wants_auth != opts.authenticate) {
      const std::string reason = opts.authenticate
                                     ? "this store requires authentication (client has authenticate=false)"
                                     : "this store does not authenticate (server has authenticate=false)";
      conn->stream->write(wire::encode_frame(wire::FrameType::reject, 0, wire::bytes_of(reason)));
      co_return reason;
    }
    if (opts.authenticate) {
      server_nonce = random_nonce();
      conn->stream->write(wire::encode_frame(wire::FrameType::challenge, 0, server_nonce));
      if (auto why = co_await conn->stream->read(256, opts.handshake_timeout, h, p); !why.empty()) co_return why;
      Mac theirs{};
      if (h.type != wire::FrameType::proof || p.size() != theirs.size()) co_return "expected a PROOF frame";
      std::copy(p.begin(), p.end(), theirs.begin());
      if (!macs_equal(theirs, store_client_proof(key, server_nonce, client_nonce))) {
        const std::string reason = "authentication failed: the client does not hold this store's key";
        conn->stream->write(wire::encode_frame(wire::FrameType::reject, 0, wire::bytes_of(reason)));
        co_return reason;
      }
    }
    // Authenticated: out of the table before the WELCOME, so that no newcomer can evict it now.
    if (!handshaking.remove(conn)) co_return std::string("evicted");
    if (opts.authenticate) {
      conn->stream->write(
          wire::encode_frame(wire::FrameType::welcome, 0, store_server_proof(key, client_nonce, server_nonce)));
    } else {
      conn->stream->write(wire::encode_frame(wire::FrameType::welcome, 0, {}));
    }
    co_return std::string{};
  }

  void drop(const std::shared_ptr<Conn>& conn) {
    for (const auto& w : conn->waiters) forget(w);
    conn->waiters.clear();
    conn->stream->close();
    conns.erase(conn);
  }

  // -- requests ------------------------------------------------------------------------------------
  static wire::Reply fail(Status s, std::string why) {
    wire::Reply r;
    r.status = s;
    r.value = std::move(why);
    return r;
  }

  void reply(const std::shared_ptr<Conn>& conn, std::uint32_t id, const wire::Reply& r) {
    if (!conn->stream->write(wire::encode_frame(wire::FrameType::reply, id, wire::encode_reply(r))))
      log().warn("store: {} does not read its replies; closed", conn->remote);
  }

  bool exists(const std::string& k) const { return data.count(k) != 0; }

  // Stores a value within the limits; an empty string on success, else why not.
  std::string put(const std::string& k, std::string v) {
    auto it = data.find(k);
    const std::size_t old = it == data.end() ? 0 : k.size() + it->second.size();
    if (it == data.end() && data.size() >= opts.max_keys)
      return "store full: " + std::to_string(data.size()) + " keys (max_keys)";
    if (bytes - old + k.size() + v.size() > opts.max_bytes)
      return "store full: " + std::to_string(bytes) + " bytes held (max_bytes)";
    bytes = bytes - old + k.size() + v.size();
    if (it == data.end()) {
      data.emplace(k, std::move(v));
    } else {
      it->second = std::move(v);
    }
    wake(k);
    return {};
  }

  void handle(const std::shared_ptr<Conn>& conn, std::uint32_t id, wire::Request rq) {
    wire::Reply r;
    switch (rq.op) {
      case wire::Op::set:
        if (auto why = put(rq.key, std::move(rq.value)); !why.empty()) r = fail(Status::INVALID_ARGUMENT, why);
        break;
      case wire::Op::get:
      case wire::Op::wait:
        if (!satisfied(rq)) return park(conn, id, std::move(rq));
        if (rq.op == wire::Op::get) r.value = data.at(rq.key);
        break;
      case wire::Op::check: r.flag = satisfied(rq); break;
      case wire::Op::add: {
        std::int64_t now = 0;
        auto it = data.find(rq.key);
        if (it != data.end() && !parse_counter(it->second, now)) {
          r = fail(Status::INVALID_ARGUMENT, "add: key " + rq.key + " does not hold an integer");
          break;
        }
        if ((rq.delta > 0 && now > std::numeric_limits<std::int64_t>::max() - rq.delta) ||
            (rq.delta < 0 && now < std::numeric_limits<std::int64_t>::min() - rq.delta)) {
          r = fail(Status::INVALID_ARGUMENT, "add: key " + rq.key + " would overflow");
          break;
        }
        now += rq.delta;
        if (auto why = put(rq.key, std::to_string(now)); !why.empty()) {
          r = fail(Status::INVALID_ARGUMENT, why);
          break;
        }
        r.number = now;
        break;
      }
      case wire::Op::compare_set: {
        auto it = data.find(rq.key);
        const bool match = it == data.end() ? rq.expected.empty() : it->second == rq.expected;
        if (match) {
          if (auto why = put(rq.key, rq.value); !why.empty()) {
            r = fail(Status::INVALID_ARGUMENT, why);
            break;
          }
          r.value = std::move(rq.value);
          r.flag = true;
        } else if (it != data.end()) {
          r.value = it->second;
        }
        break;
      }
      case wire::Op::erase: {
        auto it = data.find(rq.key);
        r.flag = it != data.end();
        if (r.flag) {
          bytes -= it->first.size() + it->second.size();
          data.erase(it);
        }
        break;
      }
    }
    reply(conn, id, r);
  }

  bool satisfied(const wire::Request& rq) const {
    if (rq.op == wire::Op::get) return exists(rq.key);
    return std::all_of(rq.keys.begin(), rq.keys.end(), [&](const std::string& k) { return exists(k); });
  }

  const std::string* first_missing(const wire::Request& rq) const {
    if (rq.op == wire::Op::get) return exists(rq.key) ? nullptr : &rq.key;
    for (const auto& k : rq.keys)
      if (!exists(k)) return &k;
    return nullptr;
  }

  // -- waiting requests ----------------------------------------------------------------------------
  void park(const std::shared_ptr<Conn>& conn, std::uint32_t id, wire::Request rq) {
    if (rq.timeout.count() == 0)
      return reply(conn, id,
                   fail(Status::TIMEOUT, "not set: " + (rq.op == wire::Op::get ? rq.key : key_list(rq.keys))));
    if (conn->waiters.size() >= opts.max_waits_per_connection)
      return reply(conn, id,
                   fail(Status::INVALID_ARGUMENT, "too many waiting requests on one connection (max " +
                                                      std::to_string(opts.max_waits_per_connection) + ")"));
    auto w = std::make_shared<Waiter>();
    w->conn = conn;
    w->id = id;
    w->request = std::move(rq);
    w->timer.emplace(ex, w->request.timeout);
    w->timer->async_wait([weak = std::weak_ptr<Waiter>(w), self = weak_from_this()](const runtime::error_code& ec) {
      auto waiter = weak.lock();
      auto s = self.lock();
      if (ec || !waiter || !s || waiter->done) return;
      std::vector<std::string> missing;
      const auto& req = waiter->request;
      for (const auto& k : req.op == wire::Op::get ? std::vector<std::string>{req.key} : req.keys)
        if (!s->exists(k)) missing.push_back(k);
      s->finish(waiter, fail(Status::TIMEOUT,
                             "not set within " + std::to_string(req.timeout.count()) + " ms: " + key_list(missing)));
    });
    conn->waiters.insert(w);
    waiting[*first_missing(w->request)].push_back(w);
  }

  // A key was stored: its waiters re-check; those still missing a key wait on that one.
  void wake(const std::string& k) {
    auto it = waiting.find(k);
    if (it == waiting.end()) return;
    auto list = std::move(it->second);
    waiting.erase(it);
    for (auto& w : list) {
      if (w->done) continue;
      if (const std::string* missing = first_missing(w->request)) {
        waiting[*missing].push_back(w);
        continue;
      }
      wire::Reply r;
      if (w->request.op == wire::Op::get) r.value = data.at(w->request.key);
      finish(w, r);
    }
  }

  void finish(const std::shared_ptr<Waiter>& w, const wire::Reply& r) {
    auto conn = w->conn.lock();
    forget(w);
    if (conn) {
      conn->waiters.erase(w);
      reply(conn, w->id, r);
    }
  }

  void forget(const std::shared_ptr<Waiter>& w) {
    if (w->done) return;
    w->done = true;
    if (w->timer) w->timer->cancel();
    if (const std::string* missing = first_missing(w->request)) {
      auto it = waiting.find(*missing);
      if (it != waiting.end()) {
        std::erase(it->second, w);
        if (it->second.empty()) waiting.erase(it);
      }
    }
  }

  void close_all() {
    if (closed) return;
    closed = true;
    runtime::error_code ignored;
    if (acceptor) acceptor->close(ignored);
    handshaking.clear();
    for (const auto& c : std::set<std::shared_ptr<Conn>>(conns)) drop(c);
    handshake_log->flush();
  }

  runtime::loop_executor ex;
  StoreServerOptions opts;
  wire::Limits limits;
  AuthKey key;
  std::unique_ptr<asio::ssl::context> tls;  // null: the store speaks in clear
  std::optional<tcp::acceptor> acceptor;
  std::set<std::shared_ptr<Conn>> conns;
  std::shared_ptr<StoreStream::QueueBudget> reply_budget =
      std::make_shared<StoreStream::QueueBudget>(StoreStream::QueueBudget{0, opts.max_queued_replies});
  HandshakeTable<Conn> handshaking{opts.max_handshakes, opts.max_handshakes_per_source};  // not yet authenticated
  std::shared_ptr<ThrottledLog> handshake_log = std::make_shared<ThrottledLog>(ex, "store");
  std::unordered_map<std::string, std::string> data;
  std::unordered_map<std::string, std::vector<std::shared_ptr<Waiter>>> waiting;  // by the first key missing
  std::size_t bytes = 0;
  bool closed = false;
};

}  // namespace detail

StoreServer::StoreServer(StoreServerOptions options)
    : own_loop_(std::make_unique<runtime::EventLoop>()), loop_(own_loop_.get()) {
  own_loop_->start();
  impl_ = std::make_shared<detail::StoreServerImpl>(loop_->executor(), std::move(options));
}

StoreServer::StoreServer(runtime::EventLoop& loop, StoreServerOptions options)
    : loop_(&loop), impl_(std::make_shared<detail::StoreServerImpl>(loop.executor(), std::move(options))) {}

StoreServer::~StoreServer() {
  close();
  if (own_loop_) own_loop_->stop();
}

std::uint16_t StoreServer::listen(const std::string& host, std::uint16_t port) {
  return loop_->call([&]() -> std::uint16_t {
    auto& impl = *impl_;
    const std::string where = host + ":" + std::to_string(port);
    if (impl.closed) throw ClosedError("store listen on " + where + ": the server is closed");
    if (impl.acceptor) throw InvalidArgumentError("store: already listening");
    runtime::error_code ec;
    const auto addr = runtime::asio::ip::make_address(host, ec);
    if (ec) throw InvalidConfigError("store listen: '" + host + "' is not an IP address");
    detail::tcp::acceptor acc(impl.ex);
    const detail::tcp::endpoint ep(addr, port);
    acc.open(ep.protocol(), ec);
    if (!ec) acc.set_option(detail::tcp::acceptor::reuse_address(true), ec);
    if (!ec) acc.bind(ep, ec);
    if (!ec) acc.listen(runtime::asio::socket_base::max_listen_connections, ec);
    if (ec) throw InvalidConfigError("store cannot listen on tcp://" + where + ": " + ec.message());
    const std::uint16_t bound = acc.local_endpoint().port();
    impl.acceptor.emplace(std::move(acc));
    runtime::asio::co_spawn(impl.ex, impl.accept_loop(), runtime::asio::detached);
    runtime::log().info("store listening on tcp://{}:{} (authenticate={}, tls={})", host, bound, impl.opts.authenticate,
                        impl.tls != nullptr);
    return bound;
  });
}

void StoreServer::close() {
  loop_->call([&] { impl_->close_all(); });
}

std::size_t StoreServer::connections() const {
  return loop_->call([&] { return impl_->conns.size(); });
}

std::size_t StoreServer::keys() const {
  return loop_->call([&] { return impl_->data.size(); });
}

}  // namespace hmc
