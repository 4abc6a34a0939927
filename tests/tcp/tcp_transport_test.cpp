// HMC's checked TCP data path: two TcpTransports in one process move real bytes over loopback, and
// plain sockets play the hostile peer (no secret, a silent flood, a valid secret then bad frames).
// Nothing connects without the per-peer secret, and no request touches memory outside the buffer.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "hmc/conn_buffer.hpp"
#include "hmc/error.hpp"
#include "hmc/runtime/event_loop.hpp"
#include "memory/cpu_memory.hpp"
#include "security/auth.hpp"
#include "tcp/tcp_peer_info.hpp"
#include "tcp/tcp_transport.hpp"
#include "wire/byte_order.hpp"

namespace hmc::detail {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kBig = std::size_t{32} << 20;
constexpr std::size_t kSmall = std::size_t{1} << 20;
constexpr std::uint32_t kMagic = 0x44434d48;
constexpr std::uint64_t kMax64 = std::numeric_limits<std::uint64_t>::max();

void fill_pattern(std::byte* p, std::size_t n, std::uint64_t seed) {
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull;
  for (std::size_t i = 0; i < n; ++i) {
    if (i % 8 == 0) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
    }
    p[i] = static_cast<std::byte>(x >> (8 * (i % 8)));
  }
}

std::vector<std::byte> pattern(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> v(n);
  fill_pattern(v.data(), n, seed);
  return v;
}

std::span<const std::byte> bytes_of(const char* s) { return {reinterpret_cast<const std::byte*>(s), std::strlen(s)}; }

// The handshake proof as the protocol defines it (HMAC-SHA256 keyed with the per-peer secret).
Mac proof(std::span<const std::byte> secret, const char* who, std::uint32_t role, std::uint32_t rank,
          const Nonce& listener_nonce, const Nonce& dialer_nonce) {
  std::array<std::byte, 8> numbers{};
  store_le32(numbers.data(), role);
  store_le32(numbers.data() + 4, rank);
  return hmac_sha256(secret, {bytes_of("hmc-tcp-data"), bytes_of(who), numbers, listener_nonce, dialer_nonce});
}

std::array<std::byte, 32> frame(std::uint8_t kind, std::uint64_t token, std::uint64_t offset, std::uint64_t length) {
  std::array<std::byte, 32> h{};
  h[0] = std::byte{kind};
  store_le64(h.data() + 8, token);
  store_le64(h.data() + 16, offset);
  store_le64(h.data() + 24, length);
  return h;
}

// A plain blocking TCP socket: the peer that does not run TcpTransport.
class RawClient {
 public:
  explicit RawClient(std::uint16_t port, const char* from = nullptr) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) return;
    if (from != nullptr) {
      sockaddr_in local{};
      local.sin_family = AF_INET;
      ::inet_pton(AF_INET, from, &local.sin_addr);
      if (::bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0) {
        close();
        return;
      }
    }
    timeval tv{1, 0};  // a full accept backlog must not hang the test in connect()
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0 && !connect_interrupted()) {
      error_ = errno;
      close();
    }
  }
  ~RawClient() { close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool ok() const { return fd_ >= 0; }
  int error() const { return error_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  bool send(std::span<const std::byte> bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<std::size_t>(n);
    }
    return true;
  }

  // Exactly n bytes within 5 s; false on EOF, error or timeout.
  bool read(std::byte* out, std::size_t n) {
    const auto until = Clock::now() + 5s;
    std::size_t got = 0;
    while (got < n) {
      if (!wait_readable(until)) return false;
      const ssize_t r = ::recv(fd_, out + got, n - got, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      got += static_cast<std::size_t>(r);
    }
    return true;
  }

  // Whether the other side closed the connection within `limit`; `received` counts the bytes it
  // sent first.
  bool closed_by_peer(std::chrono::milliseconds limit = 5000ms, std::size_t* received = nullptr) {
    const auto until = Clock::now() + limit;
    std::byte sink[4096];
    for (;;) {
      if (!wait_readable(until)) return false;
      const ssize_t r = ::recv(fd_, sink, sizeof sink, 0);
      if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) return true;
      if (r > 0 && received != nullptr) *received += static_cast<std::size_t>(r);
    }
  }

  // The listener's 40-byte hello: its nonce, once magic and version are checked.
  bool read_hello(Nonce& nonce) {
    std::array<std::byte, 40> hello{};
    if (!read(hello.data(), hello.size())) return false;
    if (load_le32(hello.data()) != kMagic || load_le32(hello.data() + 4) != 1) return false;
    std::memcpy(nonce.data(), hello.data() + 8, 32);
    return true;
  }

  // A whole dialer handshake as `rank` with `secret`; true once the listener proved the same secret.
  bool authenticate(std::span<const std::byte> secret, std::uint32_t role, std::uint32_t rank) {
    Nonce listener_nonce{};
    if (!read_hello(listener_nonce)) return false;
    const Nonce nonce = random_nonce();
    const Mac mine = proof(secret, "dialer", role, rank, listener_nonce, nonce);
    std::array<std::byte, 76> hello{};
    store_le32(hello.data(), kMagic);
    store_le32(hello.data() + 4, role);
    store_le32(hello.data() + 8, rank);
    std::memcpy(hello.data() + 12, nonce.data(), 32);
    std::memcpy(hello.data() + 44, mine.data(), 32);
    if (!send(hello)) return false;
    Mac theirs{};
    if (!read(theirs.data(), theirs.size())) return false;
    return macs_equal(theirs, proof(secret, "listener", role, rank, listener_nonce, nonce));
  }

 private:
  // A signal interrupted connect(): the connection goes on in the kernel; true once it is made.
  bool connect_interrupted() {
    if (errno != EINTR) return false;
    pollfd p{fd_, POLLOUT, 0};
    int r = 0;
    do r = ::poll(&p, 1, 5000);
    while (r < 0 && errno == EINTR);
    int error = r > 0 ? 0 : ETIMEDOUT;
    socklen_t len = sizeof error;
    if (r > 0) ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &error, &len);
    errno = error;
    return error == 0;
  }

  bool wait_readable(Clock::time_point until) {
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      const int r = ::poll(&p, 1, static_cast<int>(left));
      if (r > 0) return true;
      if (r < 0 && errno != EINTR) return false;
    }
  }

  int fd_ = -1;
  int error_ = 0;  // connect's errno
};

// One session's side: its buffer, its transport and what the transport told it (loop thread only).
struct Side {
  std::uint32_t rank = 0;
  std::unique_ptr<ConnBuffer> buffer;
  std::unique_ptr<TcpTransport> transport;
  std::vector<std::uint32_t> ready;
  std::vector<std::pair<std::uint32_t, error_code>> failed;
  struct Message {
    std::uint32_t rank;
    std::vector<std::byte> bytes;
    bool check;  // what on_message_check said when the message arrived
  };
  std::vector<Message> messages;
  std::function<bool()> on_message_check;

  std::byte* data() const { return static_cast<std::byte*>(buffer->data()); }
  bool failed_with(std::uint32_t peer, Status status) const {
    for (const auto& [r, ec] : failed)
      if (r == peer && ec == make_error_code(status)) return true;
    return false;
  }
};

class TcpTransportTest : public ::testing::Test {
 protected:
  void SetUp() override { loop.start(); }
  void TearDown() override {
    loop.call([this] {
      for (auto& s : sides) s->transport.reset();
    });
  }

  Side& make_side(std::uint32_t rank, std::size_t size = kBig, TcpOptions options = {}) {
    auto s = std::make_unique<Side>();
    Side* side = s.get();
    side->rank = rank;
    side->buffer = std::make_unique<ConnBuffer>(memory, size);
    loop.call([&] {
      side->transport = std::make_unique<TcpTransport>(loop, *side->buffer, options);
      side->transport->on_peer_ready = [side](std::uint32_t r) { side->ready.push_back(r); };
      side->transport->on_peer_failed = [side](std::uint32_t r, error_code ec) { side->failed.emplace_back(r, ec); };
      side->transport->on_message = [side](std::uint32_t r, std::span<const std::byte> m) {
        const bool check = side->on_message_check ? side->on_message_check() : true;
        side->messages.push_back({r, std::vector<std::byte>(m.begin(), m.end()), check});
      };
    });
    sides.push_back(std::move(s));
    return *side;
  }

  std::vector<std::byte> info(Side& s, std::uint32_t to) {
    return loop.call([&] { return s.transport->local_info(to, LocalAddress{s.rank, "127.0.0.1", 0, ""}); });
  }

  // pred runs on the loop; polled until it holds or the limit passes.
  bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds limit = 5000ms) {
    const auto until = Clock::now() + limit;
    for (;;) {
      if (loop.call(pred)) return true;
      if (Clock::now() >= until) return false;
      std::this_thread::sleep_for(1ms);
    }
  }

  ::testing::AssertionResult connect(Side& a, Side& b) {
    const auto ia = info(a, b.rank), ib = info(b, a.rank);
    const std::string ea = loop.call([&] { return a.transport->add_peer(b.rank, ib); });
    const std::string eb = loop.call([&] { return b.transport->add_peer(a.rank, ia); });
    if (!ea.empty() || !eb.empty()) return ::testing::AssertionFailure() << "add_peer: '" << ea << "' '" << eb << "'";
    auto has = [](const std::vector<std::uint32_t>& v, std::uint32_t r) {
      return std::find(v.begin(), v.end(), r) != v.end();
    };
    if (!eventually([&] { return has(a.ready, b.rank) && has(b.ready, a.rank); }))
      return ::testing::AssertionFailure() << "on_peer_ready did not follow on both sides";
    return ::testing::AssertionSuccess();
  }

  std::future<error_code> submit(Side& s, const OpRequest& request) {
    auto done = std::make_shared<std::promise<error_code>>();
    auto result = done->get_future();
    loop.call([&] { s.transport->submit(request, [done](error_code ec) { done->set_value(ec); }); });
    return result;
  }

  // The operation's error; a failure of the test when it does not end within 10 s.
  error_code wait(std::future<error_code>& f) {
    if (f.wait_for(10s) != std::future_status::ready) {
      ADD_FAILURE() << "the operation did not complete";
      return make_error_code(Status::TIMEOUT);
    }
    return f.get();
  }

  error_code run(Side& s, OpKind kind, std::vector<Segment> segments, std::span<const std::byte> message = {}) {
    OpRequest r;
    r.rank = s.rank == 0 ? 1 : 0;
    r.kind = kind;
    r.segments = segments;
    r.message = message;
    auto f = submit(s, r);
    return wait(f);
  }

  std::uint64_t refused(Side& s) {
    return loop.call([&] { return s.transport->refused_connections(); });
  }

  std::uint16_t port(Side& s) {
    return loop.call([&] { return s.transport->listen_port(); });
  }

  // A put from `from` into `to` and a get back, every byte and the bytes around them checked.
  void check_put_get(Side& from, Side& to, std::size_t local, std::size_t remote, std::size_t size,
                     std::uint64_t seed) {
    SCOPED_TRACE("rank " + std::to_string(from.rank) + " -> " + std::to_string(to.rank) + ", " + std::to_string(size) +
                 " bytes");
    const auto src = pattern(size, seed);
    std::memcpy(from.data() + local, src.data(), size);
    std::memset(to.data() + remote - 1, 0x5a, size + 2);
    ASSERT_FALSE(run(from, OpKind::put, {{local, remote, size}}));
    EXPECT_EQ(std::memcmp(to.data() + remote, src.data(), size), 0);
    EXPECT_EQ(to.data()[remote - 1], std::byte{0x5a});
    EXPECT_EQ(to.data()[remote + size], std::byte{0x5a});

    const auto back = pattern(size, seed + 1);
    std::memcpy(to.data() + remote, back.data(), size);
    std::memset(from.data() + local - 1, 0xa5, size + 2);
    ASSERT_FALSE(run(from, OpKind::get, {{local, remote, size}}));
    EXPECT_EQ(std::memcmp(from.data() + local, back.data(), size), 0);
    EXPECT_EQ(from.data()[local - 1], std::byte{0xa5});
    EXPECT_EQ(from.data()[local + size], std::byte{0xa5});
  }

  runtime::EventLoop loop;
  std::shared_ptr<Memory> memory = std::make_shared<CpuMemory>(0);
  std::vector<std::unique_ptr<Side>> sides;
};

TEST_F(TcpTransportTest, PutsAndGetsMoveEveryByteBothWays) {
  Side& a = make_side(0);
  Side& b = make_side(1);
  ASSERT_TRUE(connect(a, b));
  std::uint64_t seed = 1;
  for (auto [from, to] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
    for (std::size_t size : {std::size_t{1}, std::size_t{100} << 10, std::size_t{8} << 20}) {
      check_put_get(*from, *to, 4096 + 3, (std::size_t{16} << 20) + 11, size, seed);
      seed += 2;
    }
  }
}

TEST_F(TcpTransportTest, ABatchOfManySmallSegmentsLandsEachWhereItSays) {
  Side& a = make_side(0);
  Side& b = make_side(1);
  ASSERT_TRUE(connect(a, b));
  std::vector<Segment> segments;
  for (std::size_t i = 0; i < 300; ++i)
    segments.push_back(
        {(std::size_t{1} << 20) + i * 1024 + i % 7, (std::size_t{4} << 20) + i * 1031, 1 + (i * 37) % 500});
  for (auto [from, to] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
    fill_pattern(from->data(), kBig, from->rank + 10);
    std::memset(to->data(), 0x5a, kBig);
    ASSERT_FALSE(run(*from, OpKind::put, segments));
    for (const Segment& s : segments) {
      ASSERT_EQ(std::memcmp(to->data() + s.remote_offset, from->data() + s.local_offset, s.size), 0) << s.remote_offset;
      ASSERT_EQ(to->data()[s.remote_offset + s.size], std::byte{0x5a}) << s.remote_offset;  // nothing past it
    }
    fill_pattern(to->data(), kBig, to->rank + 20);
    std::memset(from->data(), 0xa5, kBig);
    ASSERT_FALSE(run(*from, OpKind::get, segments));
    for (const Segment& s : segments) {
      ASSERT_EQ(std::memcmp(from->data() + s.local_offset, to->data() + s.remote_offset, s.size), 0) << s.local_offset;
      ASSERT_EQ(from->data()[s.local_offset + s.size], std::byte{0xa5}) << s.local_offset;
    }
  }
}

TEST_F(TcpTransportTest, AFlushCompletesAfterThePutBeforeItLanded) {
  Side& a = make_side(0);
  Side& b = make_side(1);
  ASSERT_TRUE(connect(a, b));
  const std::size_t size = std::size_t{4} << 20;
  fill_pattern(a.data(), size, 7);
  std::memset(b.data() + 100, 0, size);
  OpRequest put;
  put.rank = 1;
  put.kind = OpKind::put;
  const Segment s{0, 100, size};
  put.segments = {&s, 1};
  auto put_done = submit(a, put);
  OpRequest flush;
  flush.rank = 1;
  flush.kind = OpKind::flush;
  auto flush_done = submit(a, flush);
  ASSERT_FALSE(wait(flush_done));
  EXPECT_EQ(std::memcmp(b.data() + 100, a.data(), size), 0);
  EXPECT_FALSE(wait(put_done));
}

TEST_F(TcpTransportTest, MessagesArriveAndANotifyOnlyAfterItsPutsBytes) {
  Side& a = make_side(0);
  Side& b = make_side(1);
  ASSERT_TRUE(connect(a, b));
  const std::size_t size = std::size_t{8} << 20, remote = std::size_t{20} << 20;
  std::uint64_t seed = 40;
  for (auto [from, to] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
    const auto message = pattern(1000, seed++);
    ASSERT_FALSE(run(*from, OpKind::message, {}, message));
    ASSERT_TRUE(eventually([&, to = to] { return to->messages.size() == 1; }));

    const auto data = pattern(size, seed++);
    std::memcpy(from->data(), data.data(), size);
    std::memset(to->data() + remote, 0, size);
    loop.call([&, to = to] {
      to->on_message_check = [&, to] { return std::memcmp(to->data() + remote, data.data(), size) == 0; };
    });
    const auto notify = pattern(24, seed++);
    ASSERT_FALSE(run(*from, OpKind::put_notify, {{0, remote, size}}, notify));
    ASSERT_TRUE(eventually([&, to = to] { return to->messages.size() == 2; }));
    loop.call([&, from = from, to = to] {
      to->on_message_check = nullptr;
      EXPECT_EQ(to->messages[0].rank, from->rank);
      EXPECT_EQ(to->messages[0].bytes, message);
      EXPECT_EQ(to->messages[1].rank, from->rank);
      EXPECT_EQ(to->messages[1].bytes, notify);
      EXPECT_TRUE(to->messages[1].check) << "the notify arrived before its put's bytes";
    });
  }
}

TEST_F(TcpTransportTest, AWrongProofANameWithoutSecretAndGarbageAreRefused) {
  Side& a = make_side(0, kSmall);
  Side& b = make_side(1, kSmall);
  ASSERT_TRUE(connect(a, b));
  info(a, 7);  // rank 7 has a secret (not this one) and no connection yet
  fill_pattern(a.data(), kSmall, 3);
  const std::vector<std::byte> before(a.data(), a.data() + kSmall);
  const auto wrong_secret = random_nonce();
  struct Case {
    const char* what;
    std::uint32_t magic, rank;
  };
  for (const Case& c : {Case{"wrong proof", kMagic, 7}, Case{"wrong proof for a connected rank", kMagic, 1},
                        Case{"rank without a secret", kMagic, 9}, Case{"garbage", 0x12345678, 1}}) {
    SCOPED_TRACE(c.what);
    const std::uint64_t refused_before = refused(a);
    RawClient raw(port(a));
    ASSERT_TRUE(raw.ok());
    Nonce listener_nonce{};
    ASSERT_TRUE(raw.read_hello(listener_nonce));
    const Nonce nonce = random_nonce();
    std::vector<std::byte> hello(76);
    store_le32(hello.data(), c.magic);
    store_le32(hello.data() + 8, c.rank);
    std::memcpy(hello.data() + 12, nonce.data(), 32);
    const Mac mac = proof(wrong_secret, "dialer", 0, c.rank, listener_nonce, nonce);
    std::memcpy(hello.data() + 44, mac.data(), 32);
    if (std::strcmp(c.what, "garbage") == 0) fill_pattern(hello.data() + 4, 72, 99);
    // A put right behind the hello: it must never reach the buffer.
    const auto put = frame(1, 0, 0, 64);
    hello.insert(hello.end(), put.begin(), put.end());
    hello.resize(hello.size() + 64, std::byte{0xee});
    ASSERT_TRUE(raw.send(hello));
    std::size_t answered = 0;
    EXPECT_TRUE(raw.closed_by_peer(5000ms, &answered));
    EXPECT_EQ(answered, 0u) << "the listener answered an unproven dialer";
    EXPECT_TRUE(eventually([&] { return a.transport->refused_connections() == refused_before + 1; }));
  }
  EXPECT_TRUE(loop.call([&] { return std::memcmp(a.data(), before.data(), kSmall) == 0; }));
  // The honest peer was never disturbed.
  check_put_get(b, a, 64, 128, 4096, 5);
  check_put_get(a, b, 64, 128, 4096, 6);
}

TEST_F(TcpTransportTest, ASilentConnectionIsClosedAtTheHandshakeDeadline) {
  TcpOptions options;
  options.handshake_timeout = 200ms;
  Side& a = make_side(0, kSmall, options);
  info(a, 1);
  ASSERT_NE(port(a), 0);
  RawClient reads_hello(port(a)), reads_nothing(port(a));
  ASSERT_TRUE(reads_hello.ok());
  ASSERT_TRUE(reads_nothing.ok());
  Nonce nonce{};
  ASSERT_TRUE(reads_hello.read_hello(nonce));
  EXPECT_TRUE(reads_hello.closed_by_peer());
  EXPECT_TRUE(reads_nothing.closed_by_peer());
  EXPECT_TRUE(eventually([&] { return a.transport->refused_connections() == 2; }));
}

TEST_F(TcpTransportTest, AFloodOfSilentConnectionsDoesNotKeepAnHonestPeerOut) {
  TcpOptions options;
  options.handshake_timeout = 60s;  // the flood is held: only eviction makes room
  options.max_handshakes = 4;
  options.max_handshakes_per_source = 2;
  Side& a = make_side(0, kSmall, options);
  Side& b = make_side(1, kSmall);
  info(a, 1);
  const std::uint16_t listener = port(a);
  ASSERT_NE(listener, 0);
  // Silent connections from the honest peer's own address, more than the table holds.
  std::vector<std::unique_ptr<RawClient>> silent;
  for (int i = 0; i < 12; ++i) {
    silent.push_back(std::make_unique<RawClient>(listener));
    ASSERT_TRUE(silent.back()->ok());
  }
  ASSERT_TRUE(eventually([&] { return a.transport->refused_connections() >= 10; }));
  // ... and a flood from another address while the honest pair connects.
  std::atomic<bool> stop{false};
  std::atomic<int> flooded{0};
  std::thread flood([&] {
    std::deque<std::unique_ptr<RawClient>> open;
    while (!stop.load() && flooded.load() < 5000) {
      auto c = std::make_unique<RawClient>(listener, "127.0.0.2");
      if (c->ok()) flooded.fetch_add(1);
      open.push_back(std::move(c));
      if (open.size() > 32) open.pop_front();
      std::this_thread::sleep_for(200us);
    }
  });
  ASSERT_TRUE(eventually([&] { return flooded.load() >= 8; }));
  const bool connected = connect(a, b);
  stop = true;
  flood.join();
  ASSERT_TRUE(connected);
  std::size_t evicted = 0;
  for (auto& c : silent) evicted += c->closed_by_peer(10ms) ? 1 : 0;
  EXPECT_GE(evicted, 10u);
  check_put_get(b, a, 64, 128, 4096, 8);
  check_put_get(a, b, 64, 128, 4096, 9);
}

TEST_F(TcpTransportTest, ARequestOutsideTheTargetBufferDisconnectsItsSender) {
  struct Case {
    const char* what;
    OpKind kind;
    std::uint64_t offset, size;
  };
  const Case cases[] = {
      {"put across the end", OpKind::put, kSmall - 8, 16},
      {"put just past the end", OpKind::put, kSmall, 1},
      {"put whose end wraps past 2^64", OpKind::put, kMax64 - 7, 16},
      {"get across the end", OpKind::get, kSmall - 8, 16},
      {"get whose end wraps past 2^64", OpKind::get, kMax64 - 7, 16},
      {"get of a length that wraps past 2^64", OpKind::get, 8, kMax64 - 3},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Side& target = make_side(0, kSmall);
    Side& requester = make_side(1, kSmall);
    ASSERT_TRUE(connect(target, requester));
    fill_pattern(target.data(), kSmall, 11);
    fill_pattern(requester.data(), kSmall, 12);
    const std::vector<std::byte> before(target.data(), target.data() + kSmall);
    // The transport trusts its caller (the Session checks ranges): the target must not.
    EXPECT_TRUE(run(requester, c.kind, {{0, c.offset, c.size}}));
    EXPECT_TRUE(eventually([&] { return target.failed_with(1, Status::PROTOCOL_ERROR); }));
    EXPECT_TRUE(eventually([&] { return !requester.failed.empty(); }));
    EXPECT_TRUE(loop.call([&] { return std::memcmp(target.data(), before.data(), kSmall) == 0; }));
  }
}

// A peer holding a real secret (as if it had been sent our peer info) and then breaking the protocol.
class AuthenticatedRawPeer : public TcpTransportTest {
 protected:
  void SetUp() override {
    TcpTransportTest::SetUp();
    TcpOptions options;
    options.max_message = 1024;
    target = &make_side(0, kSmall, options);
    honest = &make_side(1, kSmall);
    ASSERT_TRUE(connect(*target, *honest));
    const auto bytes = info(*target, kRank);
    ASSERT_EQ(TcpPeerInfo::decode(bytes, peer_info), "");
    ASSERT_EQ(peer_info.listen_port, port(*target));
    fill_pattern(target->data(), kSmall, 21);
  }

  std::unique_ptr<RawClient> authenticated(std::uint32_t role) {
    auto c = std::make_unique<RawClient>(peer_info.listen_port);
    EXPECT_TRUE(c->ok()) << std::strerror(c->error());
    EXPECT_TRUE(c->ok() && c->authenticate(peer_info.secret, role, kRank));
    return c;
  }

  bool target_buffer_is(const std::vector<std::byte>& expected) {
    return loop.call([&] { return std::memcmp(target->data(), expected.data(), kSmall) == 0; });
  }

  // Still serving its honest peer, both ways.
  void honest_peer_still_served() {
    check_put_get(*honest, *target, 64, 128, 4096, 30);
    check_put_get(*target, *honest, 64, 128, 4096, 31);
  }

  static constexpr std::uint32_t kRank = 5;
  Side* target = nullptr;
  Side* honest = nullptr;
  TcpPeerInfo peer_info;
};

TEST_F(AuthenticatedRawPeer, IsServedInsideTheBufferThenDisconnectedForAnUnknownFrameKind) {
  auto c = authenticated(0);
  ASSERT_FALSE(HasFailure());
  // Served: a put, a get of it and a flush, inside the buffer.
  const auto data = pattern(8, 22);
  auto put = frame(1, 0, 100, 8);
  auto get = frame(2, 9, 100, 8);
  auto flush = frame(4, 10, 0, 0);
  std::vector<std::byte> out(put.begin(), put.end());
  out.insert(out.end(), data.begin(), data.end());
  out.insert(out.end(), get.begin(), get.end());
  out.insert(out.end(), flush.begin(), flush.end());
  ASSERT_TRUE(c->send(out));
  std::array<std::byte, 32 + 8 + 32> replies{};
  ASSERT_TRUE(c->read(replies.data(), replies.size()));
  EXPECT_EQ(replies[0], std::byte{0x81});
  EXPECT_EQ(load_le64(replies.data() + 8), 9u);
  EXPECT_EQ(load_le64(replies.data() + 24), 8u);
  EXPECT_EQ(std::memcmp(replies.data() + 32, data.data(), 8), 0);
  EXPECT_EQ(replies[40], std::byte{0x84});
  EXPECT_EQ(load_le64(replies.data() + 48), 10u);
  const auto served = loop.call([&] { return std::vector<std::byte>(target->data(), target->data() + kSmall); });
  EXPECT_EQ(std::memcmp(served.data() + 100, data.data(), 8), 0);

  ASSERT_TRUE(c->send(frame(0x55, 0, 0, 0)));
  EXPECT_TRUE(c->closed_by_peer());
  EXPECT_TRUE(target_buffer_is(served));
  honest_peer_still_served();
}

TEST_F(AuthenticatedRawPeer, IsDisconnectedForAMessageOverMaxMessage) {
  const std::vector<std::byte> before(target->data(), target->data() + kSmall);
  auto c = authenticated(0);
  ASSERT_FALSE(HasFailure());
  // Within the limit it is delivered, as from the rank the secret names.
  std::vector<std::byte> out;
  auto small = frame(3, 0, 0, 1024);
  out.insert(out.end(), small.begin(), small.end());
  out.resize(out.size() + 1024, std::byte{0x11});
  ASSERT_TRUE(c->send(out));
  ASSERT_TRUE(eventually([&] { return target->messages.size() == 1; }));
  EXPECT_TRUE(loop.call([&] { return target->messages[0].rank == kRank && target->messages[0].bytes.size() == 1024; }));

  out.assign(small.begin(), small.end());
  store_le64(out.data() + 24, 1025);
  out.resize(out.size() + 1025, std::byte{0x22});
  ASSERT_TRUE(c->send(out));
  EXPECT_TRUE(c->closed_by_peer());
  EXPECT_TRUE(loop.call([&] { return target->messages.size() == 1; }));
  EXPECT_TRUE(target_buffer_is(before));
  honest_peer_still_served();
}

TEST_F(AuthenticatedRawPeer, IsDisconnectedForAPutOrGetOutsideTheBuffer) {
  const std::vector<std::byte> before(target->data(), target->data() + kSmall);
  struct Case {
    std::uint8_t kind;
    std::uint64_t offset, length;
  };
  for (const Case& k : {Case{1, kSmall - 4, 8}, Case{1, kMax64 - 3, 8}, Case{1, 8, kMax64 - 3}, Case{2, kSmall, 1},
                        Case{2, kMax64, 2}}) {
    SCOPED_TRACE(std::to_string(k.kind) + " at " + std::to_string(k.offset) + " of " + std::to_string(k.length));
    auto c = authenticated(0);
    ASSERT_FALSE(HasFailure());
    const auto h = frame(k.kind, 3, k.offset, k.length);
    std::vector<std::byte> out(h.begin(), h.end());
    if (k.kind == 1) out.resize(out.size() + 64, std::byte{0xee});
    ASSERT_TRUE(c->send(out));
    std::size_t answered = 0;
    EXPECT_TRUE(c->closed_by_peer(5000ms, &answered));
    EXPECT_EQ(answered, 0u);
    EXPECT_TRUE(target_buffer_is(before));
  }
  honest_peer_still_served();
}

TEST_F(AuthenticatedRawPeer, IsDisconnectedForAReplyToNothing) {
  auto c = authenticated(1);  // its connection carries our requests: what comes in are replies
  ASSERT_FALSE(HasFailure());
  const auto reply = frame(0x84, 77, 0, 0);
  ASSERT_TRUE(c->send(reply));
  EXPECT_TRUE(c->closed_by_peer());
  honest_peer_still_served();
}

TEST_F(AuthenticatedRawPeer, CannotOpenASecondConnectionOfTheSameRole) {
  auto first = authenticated(0);
  ASSERT_FALSE(HasFailure());
  const std::uint64_t before = refused(*target);
  RawClient second(peer_info.listen_port);
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second.authenticate(peer_info.secret, 0, kRank));
  EXPECT_TRUE(second.closed_by_peer());
  EXPECT_TRUE(eventually([&] { return target->transport->refused_connections() == before + 1; }));
  // The first one is still served.
  ASSERT_TRUE(first->send(frame(4, 12, 0, 0)));
  std::array<std::byte, 32> ack{};
  ASSERT_TRUE(first->read(ack.data(), ack.size()));
  EXPECT_EQ(ack[0], std::byte{0x84});
  EXPECT_EQ(load_le64(ack.data() + 8), 12u);
}

TEST_F(AuthenticatedRawPeer, AHandshakeInFlightWhenItsRankIsRemovedIsRefused) {
  TcpPeerInfo other;
  ASSERT_EQ(TcpPeerInfo::decode(info(*target, 6), other), "");
  RawClient trigger(other.listen_port);
  ASSERT_TRUE(trigger.ok());
  ASSERT_TRUE(trigger.authenticate(other.secret, 0, 6));
  RawClient late(peer_info.listen_port);
  ASSERT_TRUE(late.ok());
  Nonce listener_nonce{};
  ASSERT_TRUE(late.read_hello(listener_nonce));
  const Nonce nonce = random_nonce();
  std::array<std::byte, 76> hello{};
  store_le32(hello.data(), kMagic);
  store_le32(hello.data() + 8, kRank);
  std::memcpy(hello.data() + 12, nonce.data(), 32);
  const Mac mac = proof(peer_info.secret, "dialer", 0, kRank, listener_nonce, nonce);
  std::memcpy(hello.data() + 44, mac.data(), 32);
  const auto header = frame(3, 0, 0, 4);
  std::vector<std::byte> message(header.begin(), header.end());
  message.resize(message.size() + 4);
  // Both sent from the loop thread, so both arrive before it runs the handshake: the valid hello is
  // checked first, and the message behind it removes rank 5 while the listener writes its proof.
  loop.call([&] {
    target->on_message_check = [this] {
      target->transport->remove_peer(kRank, make_error_code(Status::CLOSED));
      return true;
    };
    EXPECT_TRUE(late.send(hello));
    EXPECT_TRUE(trigger.send(message));
  });
  ASSERT_TRUE(eventually([&] { return target->messages.size() == 1; }));
  EXPECT_TRUE(late.closed_by_peer()) << "a connection of a removed rank stayed open";
}

}  // namespace
}  // namespace hmc::detail
