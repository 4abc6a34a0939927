// Hostile peers at the socket level against a real Session server in its own process: after every
// attack the server is up, its memory and fds are bounded, and it still serves a real peer (a
// verified put + tag). Each case prints one "HOSTILE" line: what was sent, how often, what it got.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "child_process.hpp"
#include "ctrl_test_util.hpp"
#include "flood.hpp"
#include "hmc/session.hpp"
#include "wire/byte_order.hpp"

namespace hmc {
namespace {

using namespace std::chrono_literals;
using test::RawSocket;
using detail::FrameType;

constexpr const char* kKey = "hostile suite key";
constexpr std::size_t kMaxConnections = 256;
constexpr std::size_t kMaxHandshakes = 32;
constexpr int kHelloTimeoutMs = 2000;

std::vector<std::byte> pattern(std::uint64_t t, std::size_t n) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((t * 131 + i) & 0xff);
  return v;
}

long status_kib(pid_t pid, const std::string& field) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  return -1;
}

long fd_count(pid_t pid) {
  std::error_code ec;
  long n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec))
    ++n;
  return n;
}

std::vector<std::byte> header(FrameType type, std::uint32_t length) {
  detail::FrameHeader h;
  h.type = type;
  h.length = length;
  const auto hb = detail::encode_header(h);
  return {hb.begin(), hb.end()};
}

// Whether the server closed `s` within `limit` (reading and discarding what it sent).
bool closed_by_server(RawSocket& s, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  std::byte buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    pollfd p{s.fd(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::max<long long>(0, left.count()))) <= 0) return false;
    const ssize_t n = ::recv(s.fd(), buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
  }
}

class HostileTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir = test::make_temp_dir();
    log_file = dir + "/server.log";
    ::setenv("HMC_AUTH_KEY", kKey, 1);
    ::setenv("HMC_CTRL_UDS_DIR", (dir + "/uds").c_str(), 1);
    server = new test::ChildProcess({HMC_HOSTILE_SERVER_PATH, std::to_string(kMaxConnections),
                                     std::to_string(kMaxHandshakes), std::to_string(kHelloTimeoutMs), log_file});
    ::unsetenv("HMC_AUTH_KEY");
    const std::string line = server->read_line(20s);
    ASSERT_EQ(line.rfind("PORT ", 0), 0u) << "server did not start: '" << line << "'";
    port = static_cast<std::uint16_t>(std::stoi(line.substr(5)));
    peer = new Session(options());
    ASSERT_EQ(peer->connect("127.0.0.1", port), 0u);
    rss_start = status_kib(server->pid(), "VmRSS");
  }
  static void TearDownTestSuite() {
    delete peer;
    std::printf("HOSTILE summary: server RSS %ld KiB at start, %ld KiB at end, high-water %ld KiB\n", rss_start,
                status_kib(server->pid(), "VmRSS"), status_kib(server->pid(), "VmHWM"));
    delete server;
    std::filesystem::remove_all(dir);
  }
  static SessionOptions options() {
    SessionOptions o;
    o.buffer_size = 1u << 20;
    o.ucx_net_devices = "lo";
    o.timeout = 10s;
    o.auth_key = kKey;
    o.ctrl.uds_dir = dir + "/client-uds";
    return o;
  }
  void SetUp() override {
    rss_before = status_kib(server->pid(), "VmRSS");
    log_lines_before = log_lines();
  }

  static std::size_t log_lines() {
    std::ifstream f(log_file);
    return static_cast<std::size_t>(std::count(std::istreambuf_iterator<char>(f), {}, '\n'));
  }
  // Server log lines written since the case began that contain `text`.
  int logged(const std::string& text) const {
    std::ifstream f(log_file);
    std::string line;
    std::size_t i = 0;
    int n = 0;
    while (std::getline(f, line))
      if (i++ >= log_lines_before && line.find(text) != std::string::npos) ++n;
    return n;
  }
  // Failures logged since the case began whose line contains `text`, one by one or counted in a
  // summary line ("N more like this ... (the last: <text>)"), waiting up to 3 s for `at_least`.
  int logged_or_summarized(const std::string& text, int at_least) const {
    int n = 0;
    for (auto end = std::chrono::steady_clock::now() + 3s; std::chrono::steady_clock::now() < end;
         std::this_thread::sleep_for(100ms)) {
      std::ifstream f(log_file);
      std::string line;
      std::size_t i = 0;
      n = 0;
      while (std::getline(f, line)) {
        if (i++ < log_lines_before || line.find(text) == std::string::npos) continue;
        const auto more = line.find(" more like this");
        const auto count_at = line.rfind(": ", more);
        n += more == std::string::npos || count_at == std::string::npos
                 ? 1
                 : std::stoi(line.substr(count_at + 2, more - count_at - 2));
      }
      if (n >= at_least) break;
    }
    return n;
  }

  // The server process is alive and serves `s` (rank at the server): put pattern(t), tag t, echo.
  static void verify(Session& s, std::uint64_t t) {
    int status = 0;
    ASSERT_EQ(::waitpid(server->pid(), &status, WNOHANG), 0) << "the server process died";
    const auto p = pattern(t, 4096);
    s.buffer().write_from_cpu(p.data(), p.size(), 0);
    s.put(0, 0, 0, p.size());
    s.ctrl_send(0, t);
    ASSERT_EQ(s.ctrl_recv(0, 10s), t) << "the server saw other bytes behind the tag";
  }
  void report(const std::string& what, int count, const std::string& produced) {
    static std::uint64_t round = 1000;
    verify(*peer, ++round);
    const long rss = status_kib(server->pid(), "VmRSS");
    std::printf("HOSTILE %-28s x%-4d -> %s; server RSS %ld -> %ld KiB, %ld fds; real peer verified\n", what.c_str(),
                count, produced.c_str(), rss_before, rss, fd_count(server->pid()));
    EXPECT_LT(rss - rss_before, 64 * 1024) << "server memory grew by more than 64 MiB";
  }

  static inline std::string dir, log_file;
  static inline test::ChildProcess* server = nullptr;
  static inline Session* peer = nullptr;
  static inline std::uint16_t port = 0;
  static inline long rss_start = 0;
  long rss_before = 0;
  std::size_t log_lines_before = 0;
};

TEST_F(HostileTest, Garbage) {
  constexpr int kConns = 50;
  std::mt19937 rng(1);
  int closed = 0;
  for (int i = 0; i < kConns; ++i) {
    RawSocket s = RawSocket::tcp(port);
    std::vector<std::byte> junk(4096);
    for (auto& b : junk) b = static_cast<std::byte>(rng());
    s.send(junk);
    closed += closed_by_server(s, 5s);
  }
  EXPECT_EQ(closed, kConns);
  report("garbage 4 KiB", kConns, std::to_string(closed) + " closed by the server");
}

TEST_F(HostileTest, TruncatedFrames) {
  constexpr int kEach = 20;
  int closed = 0;
  for (int i = 0; i < kEach; ++i) {
    {  // 7 of 16 header bytes, then the sender's half is closed
      RawSocket s = RawSocket::tcp(port);
      const auto h = header(FrameType::hello, 76);
      s.send(h.data(), 7);
      s.shutdown_write();
      closed += closed_by_server(s, 5s);
    }
    {  // a HELLO header and half its payload
      RawSocket s = RawSocket::tcp(port);
      auto b = header(FrameType::hello, 76);
      b.resize(b.size() + 38);
      s.send(b);
      s.shutdown_write();
      closed += closed_by_server(s, 5s);
    }
    {  // a whole HELLO, then half a PROOF
      RawSocket s = RawSocket::tcp(port);
      detail::HelloMsg h;
      h.rank = 50;
      h.nonce = detail::random_nonce();
      s.send(detail::encode_frame(FrameType::hello, detail::encode_hello(h)));
      auto b = header(FrameType::proof, 32);
      b.resize(b.size() + 10);
      s.send(b);
      s.shutdown_write();
      closed += closed_by_server(s, 5s);
    }
  }
  EXPECT_EQ(closed, 3 * kEach);
  EXPECT_GE(logged_or_summarized("truncated frame", 3 * kEach), 3 * kEach);
  report("truncated frames (3 kinds)", 3 * kEach, std::to_string(closed) + " closed, each logged or counted");
}

TEST_F(HostileTest, HugeLengthClaimsBeforeAuthentication) {
  constexpr int kConns = 32;
  std::vector<RawSocket> conns;
  for (int i = 0; i < kConns; ++i) {
    conns.push_back(RawSocket::tcp(port));
    conns.back().send(header(i % 2 ? FrameType::hello : FrameType::bytes, 16u << 20));
    conns.back().send(std::vector<std::byte>(4096));
  }
  int closed = 0;
  for (auto& s : conns) closed += closed_by_server(s, 5s);
  EXPECT_EQ(closed, kConns);
  report("16 MiB claims, no key", kConns, std::to_string(closed) + " closed at the header (limit 512 bytes)");
}

TEST_F(HostileTest, HugeLengthClaimsFromKeyHolders) {
  // Authenticated peers that claim 16 MiB each and send 64 KiB: the server holds what arrived only.
  constexpr int kConns = 32;
  std::vector<RawSocket> conns;
  for (int i = 0; i < kConns; ++i) {
    conns.push_back(RawSocket::tcp(port));
    ASSERT_EQ(conns.back().handshake(test::key_bytes(kKey), 200 + i).header.type, FrameType::welcome);
    conns.back().send(header(FrameType::bytes, 16u << 20));
    conns.back().send(std::vector<std::byte>(64u << 10));
  }
  std::this_thread::sleep_for(300ms);
  const long rss = status_kib(server->pid(), "VmRSS");
  std::printf("HOSTILE 32 x 16 MiB claims from key holders (512 MiB claimed, 2 MiB sent): server RSS %ld -> %ld KiB\n",
              rss_before, rss);
  EXPECT_LT(rss - rss_before, 32 * 1024);
  conns.clear();
  report("16 MiB claims with the key", kConns, "held " + std::to_string((rss - rss_before) / 1024) + " MiB while open");
}

TEST_F(HostileTest, Slowloris) {
  // A valid HELLO, one byte per second: the handshake deadline (2 s here) closes every one. As many
  // as one source may hold in their handshake (max_handshakes_per_source): more would evict these.
  constexpr int kConns = 16;
  detail::HelloMsg h;
  h.rank = 60;
  h.nonce = detail::random_nonce();
  const auto hello = detail::encode_frame(FrameType::hello, detail::encode_hello(h));
  std::vector<RawSocket> conns;
  for (int i = 0; i < kConns; ++i) conns.push_back(RawSocket::tcp(port));
  std::vector<bool> closed(kConns, false);
  int n_closed = 0;
  for (std::size_t byte = 0; byte < hello.size() && n_closed < kConns && byte < 10; ++byte) {
    for (int i = 0; i < kConns; ++i) {
      if (closed[i]) continue;
      if (!conns[i].send(&hello[byte], 1) || closed_by_server(conns[i], 0ms)) {
        closed[i] = true;
        ++n_closed;
      }
    }
    std::this_thread::sleep_for(1s);
  }
  for (int i = 0; i < kConns; ++i)
    if (!closed[i] && closed_by_server(conns[i], 5s)) ++n_closed;
  EXPECT_EQ(n_closed, kConns);
  EXPECT_GE(logged_or_summarized("no complete handshake within 2000 ms", kConns), kConns);
  report("slowloris 1 byte/s", kConns, std::to_string(n_closed) + " closed at the handshake deadline");
}

TEST_F(HostileTest, WrongKeys) {
  constexpr int kConns = 20;
  int rejected = 0;
  for (int i = 0; i < kConns; ++i) {
    RawSocket s = RawSocket::tcp(port);
    rejected += s.handshake(test::key_bytes("guess " + std::to_string(i)), 70).header.type == FrameType::reject;
  }
  SessionOptions o = options();
  o.auth_key = "a wrong hostile suite key";
  Session wrong(o);
  EXPECT_THROW(wrong.connect("127.0.0.1", port), AuthenticationError);
  EXPECT_EQ(rejected, kConns);
  EXPECT_GE(logged_or_summarized("does not match our key", kConns + 1), kConns + 1);
  report("wrong keys", kConns + 1, std::to_string(rejected) + " REJECTs + AuthenticationError, each logged or counted");
}

TEST_F(HostileTest, ReplayedHandshakes) {
  std::vector<std::byte> recorded;
  {
    RawSocket good = RawSocket::tcp(port);
    ASSERT_EQ(good.handshake(test::key_bytes(kKey), 300, &recorded).header.type, FrameType::welcome);
  }
  std::this_thread::sleep_for(200ms);  // the recorder's rank is free again
  constexpr int kReplays = 20;
  int rejected = 0;
  for (int i = 0; i < kReplays; ++i) {
    RawSocket r = RawSocket::tcp(port);
    r.send(recorded);
    detail::Frame f;
    while (r.read_frame(f) && f.header.type == FrameType::challenge) {
    }
    rejected += f.header.type == FrameType::reject;
  }
  EXPECT_EQ(rejected, kReplays);
  report("replayed HELLO+PROOF", kReplays, std::to_string(rejected) + " rejected (fresh server nonce)");
}

TEST_F(HostileTest, RankSquatting) {
  constexpr int kSquatters = 10;
  std::vector<RawSocket> squatters;
  detail::HelloMsg h;
  h.rank = 7;
  for (int i = 0; i < kSquatters; ++i) {
    squatters.push_back(RawSocket::tcp(port));
    h.nonce = detail::random_nonce();
    squatters.back().send(detail::encode_frame(FrameType::hello, detail::encode_hello(h)));
  }
  Session owner(options());
  EXPECT_EQ(owner.connect(0, 7, "127.0.0.1", port, port), 0u);
  verify(owner, 77);
  // Documented: a squatter with the key takes a free rank first; the late owner is refused.
  RawSocket keyed = RawSocket::tcp(port);
  ASSERT_EQ(keyed.handshake(test::key_bytes(kKey), 8).header.type, FrameType::welcome);
  Session late(options());
  EXPECT_THROW(late.connect(0, 8, "127.0.0.1", port, port), ProtocolError);
  report("rank squatting", kSquatters + 1,
         "owner of rank 7 connected past 10 keyless squatters; a key holder on rank 8 refused its owner");
}

TEST_F(HostileTest, OversizedMessages) {
  RawSocket keyed = RawSocket::tcp(port);
  ASSERT_EQ(keyed.handshake(test::key_bytes(kKey), 400).header.type, FrameType::welcome);
  keyed.send(header(FrameType::bytes, (16u << 20) + 1));
  EXPECT_TRUE(closed_by_server(keyed, 5s));
  RawSocket keyless = RawSocket::tcp(port);
  keyless.send(header(FrameType::hello, 1u << 20));
  keyless.send(std::vector<std::byte>(1u << 20));
  EXPECT_TRUE(closed_by_server(keyless, 5s));
  EXPECT_GE(logged_or_summarized("exceeds the maximum", 2), 2);
  report("oversized frames", 2, "16 MiB + 1 after auth and a 1 MiB HELLO: both closed");
}

TEST_F(HostileTest, TooManyConnections) {
  constexpr int kConns = 400;
  const long fds_before = fd_count(server->pid());
  std::vector<RawSocket> conns;
  for (int i = 0; i < kConns; ++i) conns.push_back(RawSocket::tcp(port));
  // The bound holds once the server has caught up with the flood (evictions close sockets as their
  // cancelled reads complete): under load that takes longer than on an idle machine.
  const long bound = static_cast<long>(kMaxHandshakes) + 16;
  std::this_thread::sleep_for(300ms);
  long fds_during = fd_count(server->pid());
  for (int i = 0; i < 50 && fds_during - fds_before >= bound; ++i) {
    std::this_thread::sleep_for(100ms);
    fds_during = fd_count(server->pid());
  }
  verify(*peer, 5);  // an existing peer is served throughout
  int refused = 0;
  for (auto& s : conns) refused += closed_by_server(s, 20ms);
  std::printf("HOSTILE %d silent connections: %d evicted at once, server fds %ld -> %ld (max_handshakes %zu)\n", kConns,
              refused, fds_before, fds_during, kMaxHandshakes);
  EXPECT_GE(refused, kConns - static_cast<int>(kMaxHandshakes));
  EXPECT_LT(fds_during - fds_before, bound) << "the server's descriptors stayed above the bound while the flood held";
  conns.clear();
  Session fresh(options());
  for (int i = 0;; ++i) {  // the held handshakes end at their deadline or when we closed them
    try {
      fresh.connect("127.0.0.1", port);
      break;
    } catch (const NotConnectedError&) {
      ASSERT_LT(i, 50);
      std::this_thread::sleep_for(100ms);
    }
  }
  verify(fresh, 6);
  report("too many connections", kConns, std::to_string(refused) + " evicted at once, the rest closed by us");
}

class HostileFlood : public HostileTest, public ::testing::WithParamInterface<std::tuple<int, test::Flood::Mode>> {};

// A key holder connects and moves verified data while the flood goes on, from the client's own
// source (all of it from 127.0.0.1) and from eight others (127.0.0.2 ... 127.0.0.9).
TEST_P(HostileFlood, AKeyHolderGetsInWhileConnectionsThatNeverAuthenticateFloodTheServer) {
  const auto [n_sources, mode] = GetParam();
  std::vector<std::string> sources;
  for (int i = 0; i < n_sources; ++i) sources.push_back("127.0.0." + std::to_string(n_sources == 1 ? 1 : 2 + i));
  test::Flood flood(port, sources, mode);
  ASSERT_EQ(flood.setup_failures(), 0) << "the flood could not open all its connections";
  const long rss_flooded = status_kib(server->pid(), "VmRSS");
  const auto t0 = std::chrono::steady_clock::now();
  // The time it took is the figure; the timeout only tells a lockout from a delay (a full listen
  // queue holds a connection until the kernel's SYN-ACK retries find room).
  SessionOptions honest_options = options();
  honest_options.timeout = 30s;
  Session honest(honest_options);
  honest.connect("127.0.0.1", port);
  const auto connect_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  verify(honest, 8000 + n_sources);
  const long rss_during = status_kib(server->pid(), "VmRSS");
  const int opened = flood.stop();
  const long lines = static_cast<long>(log_lines() - log_lines_before);
  std::printf("HOSTILE flood (%s) from %d source(s): %d connections (%d garbage, %d held, %d more while the key holder "
              "connected); key holder connected in %lld ms and verified; server RSS %ld -> %ld -> %ld KiB "
              "(before, flooded, key holder served); %ld server log lines\n",
              mode == test::Flood::Mode::reopen ? "reopen" : "churn", n_sources, opened, test::Flood::kGarbage,
              test::Flood::kHeld, opened - test::Flood::kGarbage - test::Flood::kHeld,
              static_cast<long long>(connect_ms), rss_before, rss_flooded, rss_during, lines);
  EXPECT_LT(lines, 100) << "one log line per flooding connection";
  report("flood from " + std::to_string(n_sources) + " source(s)", opened,
         "key holder in " + std::to_string(connect_ms) + " ms");
}

INSTANTIATE_TEST_SUITE_P(Sources, HostileFlood,
                         ::testing::Combine(::testing::Values(1, 8),
                                            ::testing::Values(test::Flood::Mode::reopen, test::Flood::Mode::churn)),
                         [](const auto& p) {
                           return std::to_string(std::get<0>(p.param)) +
                                  (std::get<1>(p.param) == test::Flood::Mode::reopen ? "_reopen" : "_churn");
                         });

TEST_F(HostileTest, PlantedUnixSocket) {
  const std::string planted = "/tmp/hmc-ctrl-" + std::to_string(port) + ".sock";
  ::unlink(planted.c_str());
  RawSocket probe = RawSocket::uds(planted);  // nothing there yet
  ASSERT_FALSE(probe.connected());
  runtime::asio::io_context io;
  runtime::asio::local::stream_protocol::acceptor trap(io, runtime::asio::local::stream_protocol::endpoint(planted));
  trap.non_blocking(true);
  Session client(options());
  client.connect("127.0.0.1", port);
  verify(client, 9);
  runtime::asio::local::stream_protocol::socket s(io);
  runtime::error_code ec;
  trap.accept(s, ec);
  EXPECT_EQ(ec, runtime::asio::error::would_block) << "a client dialled the planted socket";
  ::unlink(planted.c_str());
  report("planted Unix socket", 1, "never dialled; the client used the path the server named");
}

TEST_F(HostileTest, EveryFrameTypeAndRandomFramesBeforeAuthentication) {
  std::mt19937 rng(7);
  int closed = 0, tries = 0;
  for (int type = 0; type <= 12; ++type) {
    RawSocket s = RawSocket::tcp(port);
    auto b = header(static_cast<FrameType>(type), 32);
    b.resize(b.size() + 32);
    s.send(b);
    ++tries;
    closed += closed_by_server(s, 5s);
  }
  for (int i = 0; i < 100; ++i) {  // a valid HELLO, then random well-framed bytes
    RawSocket s = RawSocket::tcp(port);
    detail::HelloMsg h;
    h.rank = 80;
    h.nonce = detail::random_nonce();
    s.send(detail::encode_frame(FrameType::hello, detail::encode_hello(h)));
    std::vector<std::byte> payload(rng() % 200);
    for (auto& x : payload) x = static_cast<std::byte>(rng());
    s.send(detail::encode_frame(static_cast<FrameType>(1 + rng() % 10), payload));
    ++tries;
    closed += closed_by_server(s, 5s);
  }
  EXPECT_EQ(closed, tries);
  report("every type / random frames", tries, std::to_string(closed) + " closed, no peer created");
}

}  // namespace
}  // namespace hmc
