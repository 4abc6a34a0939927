#include "tcp/tcp_transport.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "hmc/error.hpp"
#include "hmc/runtime/log.hpp"
#include "peer_log.hpp"
#include "tcp/tcp_peer_info.hpp"
#include "wire/byte_order.hpp"

namespace hmc::detail {

using runtime::log;

namespace {

constexpr std::uint32_t kHelloMagic = 0x44434d48;  // "HMCD"
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kHeader = 32;                        // kind, 7 zero bytes, token, offset, length
constexpr std::size_t kListenerHello = 4 + 4 + 32;         // magic, version, nonce
constexpr std::size_t kDialerHello = 4 + 4 + 4 + 32 + 32;  // magic, role, rank, nonce, proof
constexpr std::size_t kRxBuffer = std::size_t{64} << 10;   // small frames are read in bulk from it
constexpr std::size_t kMaxGather = 64;                     // frames per write

// Whose requests a connection carries, as the dialer names it in its hello.
constexpr std::uint32_t kDialerRequests = 0;
constexpr std::uint32_t kListenerRequests = 1;

enum Kind : std::uint8_t { kPut = 1, kGet = 2, kMessage = 3, kFlush = 4, kGetData = 0x81, kFlushAck = 0x84 };

error_code lost() { return make_error_code(Status::PEER_LOST); }

std::span<const std::byte> bytes_of(const void* p, std::size_t n) { return {static_cast<const std::byte*>(p), n}; }

bool host_memory(MemoryType t) { return t == MemoryType::CPU || t == MemoryType::DEFAULT; }

// ThreadSanitizer sees no synchronisation through a socket whose receives the io_uring ring
// completes, yet every byte sent happens before its receipt: say so, for peers in one process.
// The bytes a send reads are read by the kernel before the peer can have them, so they are ordered
// before anything the peer does on receipt too: TSan is told not to record them as this thread's.
#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
char socket_order;
void before_send() { __tsan_release(&socket_order); }
void after_receive() { __tsan_acquire(&socket_order); }
struct KernelReads {
  KernelReads() { __tsan_ignore_thread_begin(); }
  ~KernelReads() { __tsan_ignore_thread_end(); }
};
#else
void before_send() {}
void after_receive() {}
struct KernelReads {};
#endif

}  // namespace

namespace asio = runtime::asio;

struct TcpTransport::Conn : std::enable_shared_from_this<Conn> {
  Conn(socket_type s, std::string r)
      : socket(std::move(s)), remote(std::move(r)), drained(socket.get_executor()), deadline(socket.get_executor()) {}

  struct Out {
    std::array<std::byte, kHeader> header{};
    const std::byte* data = nullptr;  // payload written after the header (put, message, get data)
    std::size_t length = 0;
    PostId token = kNoPostId;
    bool report = false;  // the token is reported once the frame is written
    bool reply = false;   // counts against the peer's queued replies
  };
  struct Pending {  // a request whose reply we wait for; replies come in request order
    PostId token = kNoPostId;
    std::uint8_t kind = 0;
    std::byte* dest = nullptr;
    std::uint64_t length = 0;
  };

  socket_type socket;
  std::string remote;
  std::uint32_t rank = 0;
  bool requester = false;  // our requests go out on it (else the peer's come in)
  bool authenticated = false;
  bool closed = false;
  std::deque<Out> queue;
  std::vector<asio::const_buffer> gather;
  std::deque<Pending> pending;
  std::size_t replies = 0;
  std::size_t front_sent = 0;   // bytes of queue.front() already written
  bool write_posted = false;    // a write_now is posted for this loop turn
  bool writing = false;         // waiting for the socket to take more
  asio::steady_timer drained;   // the reader waits on it while replies are over their bound
  asio::steady_timer deadline;  // the handshake's
  std::vector<std::byte> rx = std::vector<std::byte>(kRxBuffer);
  std::size_t rx_begin = 0;
  std::size_t rx_end = 0;

  // At least n (<= kRxBuffer) bytes buffered.
  asio::awaitable<error_code> fill(std::size_t n) {
    if (rx_end - rx_begin >= n) co_return error_code{};
    if (rx_begin != 0) {
      std::memmove(rx.data(), rx.data() + rx_begin, rx_end - rx_begin);
      rx_end -= rx_begin;
      rx_begin = 0;
    }
    while (rx_end < n) {
      error_code ec;
      const std::size_t got = co_await socket.async_read_some(asio::buffer(rx.data() + rx_end, rx.size() - rx_end),
                                                              asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return ec;
      if (closed) co_return make_error_code(asio::error::operation_aborted);
      after_receive();
      rx_end += got;
    }
    co_return error_code{};
  }

  // Exactly n bytes into dest: what is buffered first, a large rest straight from the socket.
  asio::awaitable<error_code> read_into(std::byte* dest, std::size_t n) {
    const std::size_t have = std::min(n, rx_end - rx_begin);
    if (have != 0) std::memcpy(dest, rx.data() + rx_begin, have);
    rx_begin += have;
    dest += have;
    n -= have;
    if (n == 0) co_return error_code{};
    if (n >= kRxBuffer / 2) {
      error_code ec;
      co_await asio::async_read(socket, asio::buffer(dest, n), asio::redirect_error(asio::use_awaitable, ec));
      if (!ec && closed) ec = make_error_code(asio::error::operation_aborted);
      if (!ec) after_receive();
      co_return ec;
    }
    if (error_code ec = co_await fill(n)) co_return ec;
    std::memcpy(dest, rx.data() + rx_begin, n);
    rx_begin += n;
    co_return error_code{};
  }

  asio::awaitable<error_code> write_all(std::span<const std::byte> bytes) {
    error_code ec;
    before_send();
    co_await asio::async_write(socket, asio::buffer(bytes.data(), bytes.size()),
                               asio::redirect_error(asio::use_awaitable, ec));
    if (!ec && closed) ec = make_error_code(asio::error::operation_aborted);
    co_return ec;
  }

  static asio::awaitable<void> wait_on(asio::steady_timer& t) {
    t.expires_at(asio::steady_timer::time_point::max());
    error_code ignored;
    co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
  }

  void start_deadline(std::chrono::milliseconds d) {
    deadline.expires_after(d);
    deadline.async_wait([weak = weak_from_this()](error_code ec) {
      auto c = weak.lock();
      if (ec || !c || c->authenticated || c->closed) return;
      error_code ignored;
      c->socket.shutdown(socket_type::shutdown_both, ignored);  // the handshake coroutine sees it and gives up
    });
  }
};

TcpTransport::TcpTransport(runtime::EventLoop& loop, ConnBuffer& buffer, TcpOptions options)
    : loop_(loop),
      buffer_(buffer),
      options_(std::move(options)),
      regions_([](void*) {}),
      engine_(loop.executor(), *this, regions_, options_.engine),
      handshakes_(options_.max_handshakes, options_.max_handshakes_per_source),
      refusals_(std::make_shared<ThrottledLog>(loop.executor(), "tcp data connection")) {
  regions_.set_buffer(RegionTable::Region{buffer_.data(), buffer_.size(), nullptr, false, 0, false});
  efd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (efd_ < 0) throw Error(Status::ERROR, std::string("eventfd: ") + std::strerror(errno));
}

bool TcpTransport::progress() {
  const bool moved = moved_ != moved_reported_;
  moved_reported_ = moved_;
  return moved;
}

TcpTransport::~TcpTransport() {
  poller_.detach();
  for (auto rank : peers_.ranks()) remove_peer(rank, make_error_code(Status::CLOSED));
  std::vector<std::shared_ptr<Conn>> waiting;
  handshakes_.for_each([&](const std::shared_ptr<Conn>& c) { waiting.push_back(c); });
  for (auto& c : waiting) close_conn(*c, make_error_code(Status::CLOSED), false);
  handshakes_.clear();
  if (acceptor_) {
    error_code ignored;
    acceptor_->close(ignored);
  }
  refusals_->flush();
  ::close(efd_);
}

void TcpTransport::open_listener(const std::string& ip) {
  listen_ip_ = ip;
  error_code ec;
  const auto address = asio::ip::make_address(ip, ec);
  if (!ec) {
    acceptor_.emplace(loop_.executor());
    open_tcp_acceptor(*acceptor_, asio::ip::tcp::endpoint(address, 0), ec);
  }
  if (ec) {
    log().warn("tcp data listener on '{}' not opened ({}): peers of this session dial it instead", ip, ec.message());
    acceptor_.reset();
    return;
  }
  listen_port_ = acceptor_->local_endpoint(ec).port();
  asio::co_spawn(loop_.executor(), accept_loop(), asio::detached);
  log().debug("tcp data listener on {}:{}", ip, listen_port_);
}

std::vector<std::byte> TcpTransport::local_info(std::uint32_t to, const LocalAddress& self) {
  self_rank_ = self.rank;
  // Where the control listener is (every interface, if the caller bound it there), else our address.
  if (listen_ip_.empty()) {
    error_code ec;
    asio::ip::make_address(self.bind_ip, ec);
    open_listener(ec ? self.ip : self.bind_ip);
  }
  // A fresh secret per peer and connection: `to` proves itself with it when it connects.
  const Nonce secret = random_nonce();
  secret_for_[to] = secret;
  TcpPeerInfo info;
  info.rank = self.rank;
  info.buffer_size = buffer_.size();
  info.address_ip = self.ip;
  info.data_port = self.data_port;
  info.listen_ip = listen_port_ != 0 ? listen_ip_ : std::string();
  info.listen_port = listen_port_;
  info.secret = secret;
  return info.encode();
}

std::string TcpTransport::add_peer(std::uint32_t rank, std::span<const std::byte> bytes) {
  if (const Peer* existing = peers_.find(rank); existing != nullptr && existing->added)
    return "rank " + std::to_string(rank) + " is connected already";
  TcpPeerInfo info;
  if (std::string why = TcpPeerInfo::decode(bytes, info); !why.empty()) return why;
  if (info.rank != rank) return "peer info names rank " + std::to_string(info.rank);
  // Sockets read and write host memory: device memory reaches this path only through staging.
  if (!host_memory(buffer_.type()))
    return "this session's buffer is device memory, which HMC's TCP path cannot reach (this UCX moves it "
           "natively, but not to rank " +
           std::to_string(rank) + ", which shares no memory and no RDMA path with it)";
  if (secret_for_.count(rank) == 0) return "no peer info was sent to rank " + std::to_string(rank) + " first";
  // The higher rank dials when the lower one listens; a side that cannot listen is dialled by the other.
  const bool we_listen = listen_port_ != 0;
  const bool we_dial = info.listen_port != 0 && (self_rank_ > rank || !we_listen);
  if (!we_dial && !we_listen)
    return "neither this session nor rank " + std::to_string(rank) + " has a tcp data listener";
  Peer& p = peers_.find_or_add(rank);
  p.record = PeerRecord{rank, info.address_ip, info.data_port, info.buffer_size};
  p.added = true;
  engine_.peer_added(rank);
  if (we_dial) {
    // A listener on every interface is reached where its control connection came from.
    error_code ec;
    auto address = asio::ip::make_address(info.listen_ip, ec);
    if (ec || address.is_unspecified()) {
      auto known = host_of_.find(rank);
      address =
          asio::ip::make_address(known != host_of_.end() && !known->second.empty() ? known->second : "127.0.0.1", ec);
    }
    const asio::ip::tcp::endpoint to(address, info.listen_port);
    for (bool ours : {true, false}) {
      socket_type s = ec ? socket_type(loop_.executor())
                         : open_stream_socket(loop_.executor(), address.is_v6() ? AF_INET6 : AF_INET, ec);
      if (ec) {
        fail_peer(rank, lost(), "cannot dial its tcp data listener at " + info.listen_ip + ": " + ec.message());
        return {};
      }
      auto c = std::make_shared<Conn>(std::move(s), address.to_string() + ":" + std::to_string(info.listen_port));
      c->rank = rank;
      c->requester = ours;
      (ours ? p.out : p.in) = c;
      asio::co_spawn(loop_.executor(), dial(c, to, info.secret), asio::detached);
    }
    log().info("tcp peer rank {} connecting to {} ({} bytes)", rank,
               to.address().to_string() + ":" + std::to_string(to.port()), info.buffer_size);
  } else {
    log().info("tcp peer rank {} expected to connect ({} bytes)", rank, info.buffer_size);
    maybe_ready(p);
  }
  return {};
}

Mac TcpTransport::proof(const std::array<std::byte, 32>& secret, const char* who, std::uint32_t role,
                        std::uint32_t rank, const Nonce& listener_nonce, const Nonce& dialer_nonce) const {
  std::array<std::byte, 8> numbers{};
  store_le32(numbers.data(), role);
  store_le32(numbers.data() + 4, rank);
  return hmac_sha256(
      secret, {bytes_of("hmc-tcp-data", 12), bytes_of(who, std::strlen(who)), numbers, listener_nonce, dialer_nonce});
}

asio::awaitable<void> TcpTransport::accept_loop() {
  for (;;) {
    error_code ec;
    auto life = std::weak_ptr<int>(life_);
    asio::ip::tcp::acceptor& acc = *acceptor_;
    co_await acc.async_wait(asio::ip::tcp::acceptor::wait_read, asio::redirect_error(asio::use_awaitable, ec));
    if (!life.lock() || !acc.is_open() || ec == asio::error::operation_aborted) co_return;
    for (int batch = 1;; ++batch) {
      // A flood must not keep this loop accepting while the handshakes it started wait to run.
      if (batch % 16 == 0) {
        co_await asio::post(loop_.executor(), asio::use_awaitable);
        if (!life.lock() || !acc.is_open()) co_return;
      }
      std::string remote;
      socket_type s = accept_one(acc, remote, ec);
      if (ec == asio::error::would_block) break;
      if (ec) {
        log().warn("tcp data accept failed: {}", ec.message());
        asio::steady_timer pause(loop_.executor(), std::chrono::milliseconds(10));  // e.g. out of fds
        co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        if (!life.lock()) co_return;
        break;
      }
      admit(std::move(s), remote);
    }
  }
}

void TcpTransport::admit(socket_type s, const std::string& remote) {
  auto c = std::make_shared<Conn>(std::move(s), remote);
  const std::string source = source_of(remote);
  if (auto victim = handshakes_.victim(source)) {
    ++refused_;
    refusals_->warn("evicted the unauthenticated connection from " + victim->remote + " (too many handshakes)");
    close_conn(*victim, lost(), false);
  }
  handshakes_.add(c, source, true, false);
  asio::co_spawn(loop_.executor(), listener_handshake(c), asio::detached);
}

asio::awaitable<void> TcpTransport::listener_handshake(std::shared_ptr<Conn> c) {
  auto refuse = [this, &c](const std::string& why) {
    if (c->closed) return;
    ++refused_;
    refusals_->warn("refused " + c->remote + ": " + why);
    close_conn(*c, lost(), false);
  };
  c->start_deadline(options_.handshake_timeout);
  const Nonce nonce = random_nonce();
  std::array<std::byte, kListenerHello> hello{};
  store_le32(hello.data(), kHelloMagic);
  store_le32(hello.data() + 4, kVersion);
  std::memcpy(hello.data() + 8, nonce.data(), nonce.size());
  error_code ec = co_await c->write_all(hello);
  if (c->closed) co_return;
  if (!ec) ec = co_await c->fill(kDialerHello);
  if (c->closed) co_return;
  if (ec) co_return refuse("no hello before the deadline or the connection ended (" + ec.message() + ")");
  const std::byte* h = c->rx.data() + c->rx_begin;
  const std::uint32_t magic = load_le32(h), role = load_le32(h + 4), rank = load_le32(h + 8);
  Nonce dialer_nonce{};
  Mac mac{};
  std::memcpy(dialer_nonce.data(), h + 12, 32);
  std::memcpy(mac.data(), h + 44, 32);
  c->rx_begin += kDialerHello;
  if (magic != kHelloMagic || role > kListenerRequests) co_return refuse("not an HMC data connection");
  auto secret = secret_for_.find(rank);
  if (secret == secret_for_.end())
    co_return refuse("it names rank " + std::to_string(rank) + ", which has no secret from us");
  if (!macs_equal(mac, proof(secret->second, "dialer", role, rank, nonce, dialer_nonce)))
    co_return refuse("wrong proof for rank " + std::to_string(rank));
  const Peer* p = peers_.find(rank);
  const bool requester = role == kListenerRequests;
  if (p != nullptr && (requester ? p->out : p->in))
    co_return refuse("rank " + std::to_string(rank) + " has that connection already");
  const std::array<std::byte, 32> proven = secret->second;
  const Mac ours = proof(proven, "listener", role, rank, nonce, dialer_nonce);
  ec = co_await c->write_all(ours);
  if (c->closed) co_return;
  if (ec) co_return refuse("the connection ended during the handshake (" + ec.message() + ")");
  // remove_peer (or a new local_info) may have revoked the secret while we wrote.
  secret = secret_for_.find(rank);
  if (secret == secret_for_.end() || secret->second != proven)
    co_return refuse("rank " + std::to_string(rank) + " was removed during the handshake");
  // Another connection of the same role may have won while we wrote.
  p = peers_.find(rank);
  if (p != nullptr && (requester ? p->out : p->in))
    co_return refuse("rank " + std::to_string(rank) + " has that connection already");
  handshakes_.remove(c);
  c->authenticated = true;
  c->deadline.cancel();
  c->rank = rank;
  c->requester = requester;
  attached(rank, c);
}

asio::awaitable<void> TcpTransport::dial(std::shared_ptr<Conn> c, asio::ip::tcp::endpoint to,
                                         std::array<std::byte, 32> secret) {
  const std::uint32_t rank = c->rank;
  auto give_up = [this, &c, rank](const std::string& why) {
    if (!c->closed) fail_peer(rank, lost(), why);
  };
  c->start_deadline(options_.handshake_timeout);
  error_code ec;
  co_await c->socket.async_connect(asio::generic::stream_protocol::endpoint(to),
                                   asio::redirect_error(asio::use_awaitable, ec));
  if (c->closed) co_return;
  if (ec) co_return give_up("cannot connect to its tcp data listener " + c->remote + ": " + ec.message());
  ec = co_await c->fill(kListenerHello);
  if (c->closed) co_return;
  if (ec) co_return give_up("its tcp data listener " + c->remote + " sent no hello: " + ec.message());
  const std::byte* h = c->rx.data() + c->rx_begin;
  if (load_le32(h) != kHelloMagic || load_le32(h + 4) != kVersion)
    co_return give_up(c->remote + " is not an HMC data listener of this version");
  Nonce listener_nonce{};
  std::memcpy(listener_nonce.data(), h + 8, 32);
  c->rx_begin += kListenerHello;
  const Nonce nonce = random_nonce();
  const std::uint32_t role = c->requester ? kDialerRequests : kListenerRequests;
  std::array<std::byte, kDialerHello> hello{};
  store_le32(hello.data(), kHelloMagic);
  store_le32(hello.data() + 4, role);
  store_le32(hello.data() + 8, self_rank_);
  std::memcpy(hello.data() + 12, nonce.data(), 32);
  const Mac mine = proof(secret, "dialer", role, self_rank_, listener_nonce, nonce);
  std::memcpy(hello.data() + 44, mine.data(), 32);
  ec = co_await c->write_all(hello);
  if (!c->closed && !ec) ec = co_await c->fill(32);
  if (c->closed) co_return;
  if (ec) co_return give_up("its tcp data listener " + c->remote + " refused this session: " + ec.message());
  Mac theirs{};
  std::memcpy(theirs.data(), c->rx.data() + c->rx_begin, 32);
  c->rx_begin += 32;
  if (!macs_equal(theirs, proof(secret, "listener", role, self_rank_, listener_nonce, nonce)))
    co_return give_up(c->remote + " did not prove the peer's secret (not the session it names)");
  c->authenticated = true;
  c->deadline.cancel();
  attached(rank, c);
}

void TcpTransport::set_socket_options(Conn& c) const {
  const int on = 1;
  const int fd = c.socket.native_handle();
  // Headers, flushes and their acks are small frames that must not wait for Nagle.
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  if (options_.keepalive.count() <= 0) return;
  // As UCX's tcp: probes after `keepalive` idle, then 3 a fifth of it apart (at least 1 s).
  const int idle = std::max<int>(1, static_cast<int>(options_.keepalive.count() / 1000));
  const int interval = std::max(1, idle / 5), count = 3;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

void TcpTransport::attached(std::uint32_t rank, const std::shared_ptr<Conn>& c) {
  Peer& p = peers_.find_or_add(rank);
  (c->requester ? p.out : p.in) = c;
  set_socket_options(*c);
  asio::co_spawn(loop_.executor(), read_loop(c), asio::detached);
  error_code ignored;
  c->socket.non_blocking(true, ignored);  // write_now writes what the socket takes at once
  maybe_ready(p);
}

void TcpTransport::maybe_ready(Peer& p) {
  if (!p.added || p.ready || !p.out || !p.in || !p.out->authenticated || !p.in->authenticated) return;
  p.ready = true;
  log().info("tcp peer rank {} connected", p.record.rank);
  asio::post(loop_.executor(), [this, life = std::weak_ptr<int>(life_), rank = p.record.rank, at = &p] {
    if (!life.lock()) return;
    if (peers_.find(rank) != at) return;
    if (on_peer_ready) on_peer_ready(rank);
  });
}

void TcpTransport::connection_failed(const Conn& c, error_code ec) {
  fail_peer(c.rank, lost(), "its tcp data connection ended: " + ec.message());
}

void TcpTransport::violation(Conn& c, const std::string& why) {
  if (c.closed) return;
  log().error("tcp peer rank {} broke the data protocol ({}); disconnecting it{}", c.rank, why,
              peer_fields(c.rank, "data", Status::PROTOCOL_ERROR));
  fail_peer(c.rank, make_error_code(Status::PROTOCOL_ERROR), why);
}

asio::awaitable<void> TcpTransport::read_loop(std::shared_ptr<Conn> c) {
  for (;;) {
    error_code ec = co_await c->fill(kHeader);
    if (c->closed) co_return;
    if (ec) {
      connection_failed(*c, ec);
      co_return;
    }
    const std::byte* h = c->rx.data() + c->rx_begin;
    const auto kind = static_cast<std::uint8_t>(h[0]);
    const PostId token = load_le64(h + 8);
    const std::uint64_t offset = load_le64(h + 16), length = load_le64(h + 24);
    c->rx_begin += kHeader;
    ++moved_;
    if (!c->requester) {
      if (!co_await serve(c, kind, token, offset, length)) co_return;
      continue;
    }
    // A reply: to the oldest request still waiting, the kind and size it asked for.
    if (c->pending.empty() || c->pending.front().token != token ||
        (kind == kGetData ? c->pending.front().kind != kGet || length != c->pending.front().length
                          : kind != kFlushAck || c->pending.front().kind != kFlush)) {
      violation(*c, "a reply that answers no request of ours");
      co_return;
    }
    if (kind == kGetData) {
      ec = co_await c->read_into(c->pending.front().dest, length);
      if (c->closed) co_return;
      if (ec) {
        connection_failed(*c, ec);
        co_return;
      }
    }
    c->pending.pop_front();
    if (token != kNoPostId) engine_.completed(token, {});
  }
}

// One request from the peer, checked against the only memory it may touch: the session buffer.
asio::awaitable<bool> TcpTransport::serve(std::shared_ptr<Conn> c, std::uint8_t kind, PostId token,
                                          std::uint64_t offset, std::uint64_t length) {
  const std::uint64_t size = buffer_.size();
  const bool in_buffer = offset <= size && length <= size - offset;
  auto outside = [&] {
    return "a " + std::string(kind == kPut ? "put" : "get") + " of " + std::to_string(length) + " bytes at offset " +
           std::to_string(offset) + " of a " + std::to_string(size) + "-byte session buffer";
  };
  // A target that is behind on its replies reads no more requests: the peer's writes then wait.
  while ((kind == kGet || kind == kFlush) && c->replies >= options_.max_queued_replies) {
    co_await Conn::wait_on(c->drained);
    if (c->closed) co_return false;
  }
  auto* base = static_cast<std::byte*>(buffer_.data());
  switch (kind) {
    case kPut: {
      if (!in_buffer) {
        violation(*c, outside());
        co_return false;
      }
      const error_code ec = co_await c->read_into(base + offset, length);
      if (c->closed) co_return false;
      if (ec) {
        connection_failed(*c, ec);
        co_return false;
      }
      co_return true;
    }
    case kGet:
      if (!in_buffer) {
        violation(*c, outside());
        co_return false;
      }
      enqueue(*c, kGetData, token, 0, length, base + offset, false);
      c->queue.back().reply = true;
      ++c->replies;
      co_return true;
    case kFlush:
      enqueue(*c, kFlushAck, token, 0, 0, nullptr, false);
      c->queue.back().reply = true;
      ++c->replies;
      co_return true;
    case kMessage: {
      if (length > options_.max_message) {
        violation(*c, "a fast-path message of " + std::to_string(length) + " bytes");
        co_return false;
      }
      std::vector<std::byte> message(length);
      const error_code ec = co_await c->read_into(message.data(), message.size());
      if (c->closed) co_return false;
      if (ec) {
        connection_failed(*c, ec);
        co_return false;
      }
      if (on_message) on_message(c->rank, message);
      co_return !c->closed;
    }
    default: violation(*c, "an unknown frame kind " + std::to_string(kind)); co_return false;
  }
}

// Writes the queued frames now, as far as the socket takes them without blocking: most frames
// leave in this call, with no ring round trip; the rest wait until the socket is writable.
void TcpTransport::write_now(const std::shared_ptr<Conn>& c) {
  c->write_posted = false;
  std::vector<PostId> written;
  while (!c->closed && !c->writing && !c->queue.empty()) {
    c->gather.clear();
    std::size_t skip = c->front_sent;
    auto add = [&](const void* p, std::size_t n) {
      const std::size_t drop = std::min(skip, n);
      skip -= drop;
      if (n > drop) c->gather.emplace_back(static_cast<const std::byte*>(p) + drop, n - drop);
    };
    const std::size_t n = std::min(c->queue.size(), kMaxGather);
    for (std::size_t i = 0; i < n; ++i) {
      const Conn::Out& o = c->queue[i];
      add(o.header.data(), o.header.size());
      if (o.length != 0) add(o.data, o.length);
    }
    error_code ec;
    before_send();
    std::size_t left = 0;
    {
      [[maybe_unused]] KernelReads kernel;
      left = c->socket.write_some(c->gather, ec);
    }
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      c->writing = true;
      c->socket.async_wait(socket_type::wait_write, [this, life = std::weak_ptr<int>(life_), c](error_code wait_ec) {
        if (!life.lock() || c->closed) return;
        c->writing = false;
        if (wait_ec) return connection_failed(*c, wait_ec);
        write_now(c);
      });
      break;
    }
    if (ec) {
      connection_failed(*c, ec);
      return;
    }
    left += c->front_sent;
    c->front_sent = 0;
    written.clear();
    std::size_t replies_done = 0;
    while (!c->queue.empty()) {
      const Conn::Out& o = c->queue.front();
      const std::size_t total = o.header.size() + o.length;
      if (left < total) {
        c->front_sent = left;
        break;
      }
      left -= total;
      if (o.report && o.token != kNoPostId) written.push_back(o.token);
      if (o.reply) ++replies_done;
      c->queue.pop_front();
    }
    c->replies -= replies_done;
    if (replies_done != 0) c->drained.cancel();
    ++moved_;
    for (PostId t : written) engine_.completed(t, {});
  }
}

void TcpTransport::enqueue(Conn& c, std::uint8_t kind, PostId token, std::uint64_t offset, std::uint64_t length,
                           const std::byte* data, bool report_on_write) {
  Conn::Out& o = c.queue.emplace_back();
  o.header[0] = std::byte{kind};
  store_le64(o.header.data() + 8, token);
  store_le64(o.header.data() + 16, offset);
  store_le64(o.header.data() + 24, length);
  o.data = data;
  o.length = data != nullptr ? length : 0;
  o.token = token;
  o.report = report_on_write;
  if (c.requester) poller_.kick();  // a submission: the loop may spin for its answer
  // Frames queued in one loop turn (a put and its flush) leave in one write.
  if (c.writing || c.write_posted) return;
  c.write_posted = true;
  asio::post(loop_.executor(), [this, life = std::weak_ptr<int>(life_), conn = c.shared_from_this()] {
    if (life.lock() && !conn->closed) write_now(conn);
  });
}

TcpTransport::Conn* TcpTransport::out_conn(std::uint32_t rank) const {
  const Peer* p = peers_.find(rank);
  if (p == nullptr || !p->ready || !p->out || p->out->closed) return nullptr;
  return p->out.get();
}

PostResult TcpTransport::post_rma(std::uint32_t rank, bool is_put, std::uint64_t region, const Segment& s,
                                  PostId token) {
  Conn* c = out_conn(rank);
  if (c == nullptr) return {lost(), false};
  const RegionTable::Region* local = regions_.in_use(region);
  if (local == nullptr || device_regions_.count(region) != 0) return {make_error_code(Status::INVALID_ARGUMENT), false};
  std::byte* at = static_cast<std::byte*>(local->base) + s.local_offset;
  if (is_put) {
    enqueue(*c, kPut, token, s.remote_offset, s.size, at, true);
  } else {
    enqueue(*c, kGet, token, s.remote_offset, s.size, nullptr, false);
    c->pending.push_back(Conn::Pending{token, kGet, at, s.size});
  }
  return {{}, token != kNoPostId};
}

PostResult TcpTransport::post_flush(std::uint32_t rank, PostId token) {
  Conn* c = out_conn(rank);
  if (c == nullptr) return {lost(), false};
  enqueue(*c, kFlush, token, 0, 0, nullptr, false);
  c->pending.push_back(Conn::Pending{token, kFlush, nullptr, 0});
  return {{}, token != kNoPostId};
}

PostResult TcpTransport::post_message(std::uint32_t rank, std::span<const std::byte> bytes, PostId token) {
  Conn* c = out_conn(rank);
  if (c == nullptr) return {lost(), false};
  enqueue(*c, kMessage, token, 0, bytes.size(), bytes.data(), true);
  return {{}, token != kNoPostId};
}

void TcpTransport::close_conn(Conn& c, error_code reason, bool report) {
  if (c.closed) return;
  c.closed = true;
  error_code ignored;
  // Shut down first: a read in flight into the session buffer ends now, not after the close.
  c.socket.shutdown(socket_type::shutdown_both, ignored);
  c.socket.close(ignored);
  c.drained.cancel();
  c.deadline.cancel();
  handshakes_.remove(c.shared_from_this());
  std::vector<PostId> failed;
  for (const Conn::Out& o : c.queue)
    if (o.report && o.token != kNoPostId) failed.push_back(o.token);
  for (const Conn::Pending& p : c.pending)
    if (p.token != kNoPostId) failed.push_back(p.token);
  c.queue.clear();
  c.pending.clear();
  if (report)
    for (PostId t : failed) engine_.completed(t, reason);
}

void TcpTransport::fail_peer(std::uint32_t rank, error_code reason, const std::string& why) {
  std::unique_ptr<Peer> p = peers_.take(rank);
  if (p == nullptr) return;
  if (p->added) engine_.peer_removed(rank, reason);
  log().info("tcp peer rank {} lost: {}", rank, why);  // the Session reports the loss itself
  if (p->out) close_conn(*p->out, reason, true);
  if (p->in) close_conn(*p->in, reason, true);
  if (!p->added) return;
  asio::post(loop_.executor(), [this, life = std::weak_ptr<int>(life_), rank, reason] {
    if (life.lock() && on_peer_failed) on_peer_failed(rank, reason);
  });
}

void TcpTransport::remove_peer(std::uint32_t rank, error_code reason) {
  secret_for_.erase(rank);
  host_of_.erase(rank);
  std::unique_ptr<Peer> p = peers_.take(rank);
  if (p == nullptr) return;
  if (p->added) engine_.peer_removed(rank, reason);
  log().info("tcp peer rank {} removed: {}", rank, reason.message());
  if (p->out) close_conn(*p->out, reason, true);
  if (p->in) close_conn(*p->in, reason, true);
}

const PeerRecord* TcpTransport::peer(std::uint32_t rank) const {
  const Peer* p = peers_.find(rank);
  return p == nullptr || !p->added ? nullptr : &p->record;
}

std::vector<std::uint32_t> TcpTransport::ranks() const {
  std::vector<std::uint32_t> out;
  for (const auto& [rank, p] : peers_)
    if (p->added) out.push_back(rank);
  return out;
}

std::string TcpTransport::carriers(std::uint32_t rank) const { return peer(rank) != nullptr ? "hmc-tcp" : ""; }

std::uint64_t TcpTransport::register_region(void* base, std::size_t size, MemoryType type) {
  const std::uint64_t id = regions_.add(RegionTable::Region{base, size, nullptr, false, 0, false});
  if (!host_memory(type)) device_regions_.insert(id);
  return id;
}

std::size_t TcpTransport::region_size(std::uint64_t id) const {
  const RegionTable::Region* r = regions_.find(id);
  return r == nullptr ? 0 : r->size;
}

}  // namespace hmc::detail
