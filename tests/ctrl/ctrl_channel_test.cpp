// Control channel in one process, over TCP and over Unix sockets.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "ctrl/ctrl_frame.hpp"
#include "ctrl_test_util.hpp"
#include "hmc/ctrl_channel.hpp"
#include "wire/byte_order.hpp"

namespace hmc {
namespace {

using namespace std::chrono_literals;
namespace asio = runtime::asio;
using test::RawSocket;

struct Point {
  double x;
  std::int32_t id;
};

constexpr const char* kTestKey = "ctrl-channel-test-key";

CtrlOptions options_for(CtrlTransport t, const std::string& dir) {
  CtrlOptions o;
  o.transport = t;
  o.uds_dir = dir;
  // Short enough for the silent-connection case, long enough for every honest handshake under TSan on a loaded machine.
  o.hello_timeout = 2s;
  o.auth_key = kTestKey;
  return o;
}

class CtrlChannelTest : public ::testing::TestWithParam<CtrlTransport> {
 protected:
  void SetUp() override {
    loop.start();
    dir = test::make_temp_dir();
    server = std::make_unique<CtrlChannel>(loop, 0, options_for(GetParam(), dir));
    port = server->listen("127.0.0.1", 0);
  }
  void TearDown() override {
    clients.clear();
    server.reset();
    std::filesystem::remove_all(dir);
  }

  // A connected client channel with the given rank.
  CtrlChannel& client(std::uint32_t rank) {
    clients.push_back(std::make_unique<CtrlChannel>(loop, rank, options_for(GetParam(), dir)));
    EXPECT_EQ(clients.back()->async_connect("127.0.0.1", port, 5s, asio::use_future).get(), 0u);
    server->async_wait_peer(rank, 5s, asio::use_future).get();
    return *clients.back();
  }

  RawSocket raw() {
    return GetParam() == CtrlTransport::uds ? RawSocket::uds(server->uds_path()) : RawSocket::tcp(port);
  }

  std::string transport_name() const { return GetParam() == CtrlTransport::uds ? "uds" : "tcp"; }

  // The server still serves: a fresh client connects and a tag goes both ways.
  void expect_server_healthy(std::uint32_t rank) {
    CtrlChannel& c = client(rank);
    c.async_send(0, CtrlMessage::from_tag(42), asio::use_future).get();
    EXPECT_EQ(server->async_recv(rank, 5s, asio::use_future).get().tag(), 42u);
    server->async_send(rank, CtrlMessage::from_tag(43), asio::use_future).get();
    EXPECT_EQ(c.async_recv(0, 5s, asio::use_future).get().tag(), 43u);
  }

  runtime::EventLoop loop;
  std::string dir;
  std::unique_ptr<CtrlChannel> server;
  std::uint16_t port = 0;
  std::vector<std::unique_ptr<CtrlChannel>> clients;
};

TEST_P(CtrlChannelTest, ConnectBindsRanksOverTheChosenTransport) {
  CtrlChannel& c = client(7);
  EXPECT_EQ(c.peers(), std::vector<std::uint32_t>{0});
  EXPECT_EQ(server->peers(), std::vector<std::uint32_t>{7});
  EXPECT_EQ(c.transport_of(0), transport_name());
  EXPECT_EQ(server->transport_of(7), transport_name());
}

TEST_P(CtrlChannelTest, HundredThousandTagsArriveInOrder) {
  constexpr std::uint64_t kTags = test::kManyTags;
  CtrlChannel& c = client(1);
  auto received = asio::co_spawn(
      loop.executor(),
      [&]() -> asio::awaitable<std::uint64_t> {
        for (std::uint64_t i = 0; i < kTags; ++i) {
          const CtrlMessage m = co_await server->async_recv(1, 10s, asio::use_awaitable);
          if (m.tag() != i) co_return i;
        }
        co_return kTags;
      },
      asio::use_future);
  std::future<void> last;
  for (std::uint64_t i = 0; i < kTags; ++i) last = c.async_send(0, CtrlMessage::from_tag(i), asio::use_future);
  last.get();
  ASSERT_EQ(received.wait_for(60s), std::future_status::ready);
  EXPECT_EQ(received.get(), kTags) << "first out-of-order tag index";
}

TEST_P(CtrlChannelTest, FourThreadsSendingToOnePeerNeverInterleaveFrames) {
  constexpr int kThreads = 4;
  constexpr std::uint32_t kPerThread = 500;
  CtrlChannel& c = client(1);
  std::vector<std::thread> senders;
  for (int t = 0; t < kThreads; ++t) {
    senders.emplace_back([&, t] {
      std::future<void> last;
      for (std::uint32_t seq = 0; seq < kPerThread; ++seq) {
        // Sizes up to 96 KiB force partial socket writes; any interleaving corrupts the pattern.
        std::vector<std::byte> msg(8 + (seq * 7919u) % (96u << 10));
        detail::store_le32(msg.data(), static_cast<std::uint32_t>(t));
        detail::store_le32(msg.data() + 4, seq);
        for (std::size_t k = 8; k < msg.size(); ++k) msg[k] = static_cast<std::byte>((t * 31 + seq + k) & 0xff);
        last = c.async_send(0, CtrlMessage::from_bytes(msg), asio::use_future);
      }
      last.get();
    });
  }
  std::array<std::uint32_t, kThreads> next{};
  int corrupt = 0, out_of_order = 0;
  for (std::uint32_t i = 0; i < kThreads * kPerThread; ++i) {
    const CtrlMessage m = server->async_recv(1, 20s, asio::use_future).get();
    const auto b = m.bytes();
    ASSERT_GE(b.size(), 8u);
    const std::uint32_t t = detail::load_le32(b.data()), seq = detail::load_le32(b.data() + 4);
    ASSERT_LT(t, static_cast<std::uint32_t>(kThreads));
    if (b.size() != 8 + (seq * 7919u) % (96u << 10)) ++corrupt;
    for (std::size_t k = 8; k < b.size(); ++k)
      if (b[k] != static_cast<std::byte>((t * 31 + seq + k) & 0xff)) {
        ++corrupt;
        break;
      }
    if (seq != next[t]++) ++out_of_order;
  }
  for (auto& s : senders) s.join();
  EXPECT_EQ(corrupt, 0);
  EXPECT_EQ(out_of_order, 0);
}

TEST_P(CtrlChannelTest, BytesAndStructsRoundTrip) {
  CtrlChannel& c = client(1);
  const Point p{3.5, -9};
  c.async_send(0, CtrlMessage::from_struct(p), asio::use_future).get();
  const std::string text = "data ready";
  c.async_send(0, CtrlMessage::from_bytes(std::as_bytes(std::span(text.data(), text.size()))), asio::use_future).get();
  const Point got = server->async_recv(1, 5s, asio::use_future).get().as<Point>();
  EXPECT_EQ(got.x, 3.5);
  EXPECT_EQ(got.id, -9);
  const CtrlMessage m = server->async_recv(1, 5s, asio::use_future).get();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m.bytes().data()), m.bytes().size()), text);
  EXPECT_THROW(m.tag(), ProtocolError);
  EXPECT_THROW(m.as<Point>(), ProtocolError);
}

TEST_P(CtrlChannelTest, RecvTimesOutAndTheNextMessageIsStillDelivered) {
  CtrlChannel& c = client(1);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(server->async_recv(1, 50ms, asio::use_future).get(), TimeoutError);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 50ms);
  c.async_send(0, CtrlMessage::from_tag(5), asio::use_future).get();
  EXPECT_EQ(server->async_recv(1, 5s, asio::use_future).get().tag(), 5u);
}

TEST_P(CtrlChannelTest, AwaitableRecvWithTimeoutInsideACoroutine) {
  CtrlChannel& c = client(1);
  auto f = asio::co_spawn(
      loop.executor(),
      [&]() -> asio::awaitable<std::string> {
        try {
          co_await server->async_recv(1, 20ms, asio::use_awaitable);
          co_return "no timeout";
        } catch (const TimeoutError&) {
        }
        co_await c.async_send(0, CtrlMessage::from_tag(9), asio::use_awaitable);
        const CtrlMessage m = co_await server->async_recv(1, 5s, asio::use_awaitable);
        co_return m.tag() == 9 ? "ok" : "wrong tag";
      },
      asio::use_future);
  EXPECT_EQ(f.get(), "ok");
}

TEST_P(CtrlChannelTest, UnknownPeerIsNotConnected) {
  try {
    server->async_recv(99, 30ms, asio::use_future).get();
    FAIL() << "a receive from a rank that never connects must time out";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("never connected"), std::string::npos) << e.what();
  }
  EXPECT_THROW(server->async_send(99, CtrlMessage::from_tag(1), asio::use_future).get(), NotConnectedError);
  EXPECT_THROW(server->async_wait_peer(99, 30ms, asio::use_future).get(), TimeoutError);
  EXPECT_THROW(server->transport_of(99), NotConnectedError);
}

TEST_P(CtrlChannelTest, PeerClosingDeliversWhatItSentThenFailsWithPeerLost) {
  CtrlChannel& c = client(1);
  auto pending = server->async_recv(1, 10s, asio::use_future);  // already waiting when the peer goes
  c.async_send(0, CtrlMessage::from_tag(1), asio::use_future).get();
  c.async_send(0, CtrlMessage::from_tag(2), asio::use_future).get();
  c.close();
  EXPECT_EQ(pending.get().tag(), 1u);
  EXPECT_EQ(server->async_recv(1, 5s, asio::use_future).get().tag(), 2u);
  EXPECT_THROW(server->async_recv(1, 5s, asio::use_future).get(), PeerLostError);
  EXPECT_THROW(server->async_send(1, CtrlMessage::from_tag(3), asio::use_future).get(), PeerLostError);
  EXPECT_TRUE(server->peers().empty());
}

TEST_P(CtrlChannelTest, LostRankMayReconnect) {
  CtrlChannel& c = client(1);
  c.close();
  EXPECT_THROW(server->async_recv(1, 5s, asio::use_future).get(), PeerLostError);
  expect_server_healthy(1);
}

// A refused connection is retried until the connect's timeout (processes of a job start together,
// the server may not listen yet); when nobody ever listens, NotConnectedError says it was refused.
TEST_P(CtrlChannelTest, ConnectToAPortNobodyListensOnIsRetriedThenRefused) {
  // Bind then close a listener to get a port that is free right now.
  std::uint16_t dead_port;
  {
    asio::io_context io;
    asio::ip::tcp::acceptor a(io, asio::ip::tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    dead_port = a.local_endpoint().port();
  }
  CtrlChannel c(loop, 1, options_for(GetParam(), dir));
  try {
    c.async_connect("127.0.0.1", dead_port, 300ms, asio::use_future).get();
    ADD_FAILURE() << "connected to a port nobody listens on";
  } catch (const NotConnectedError& e) {
    EXPECT_NE(std::string(e.what()).find("refused"), std::string::npos) << e.what();
  }
}

TEST_P(CtrlChannelTest, ConnectBeforeTheServerListensSucceedsOnceItDoes) {
  std::uint16_t late_port;
  {
    asio::io_context io;
    asio::ip::tcp::acceptor a(io, asio::ip::tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    late_port = a.local_endpoint().port();
  }
  CtrlChannel c(loop, 1, options_for(GetParam(), dir));
  auto connecting = c.async_connect("127.0.0.1", late_port, 20s, asio::use_future);
  std::this_thread::sleep_for(100ms);  // a few refused attempts first
  CtrlChannel late(loop, 0, options_for(GetParam(), dir));
  ASSERT_EQ(late.listen("127.0.0.1", late_port), late_port);
  EXPECT_EQ(connecting.get(), 0u);
}

TEST_P(CtrlChannelTest, SixteenPeersOnOneServer) {
  constexpr std::uint32_t kPeers = 16;
  for (std::uint32_t r = 1; r <= kPeers; ++r) client(r);
  EXPECT_EQ(server->peers().size(), kPeers);
  for (std::uint32_t r = 1; r <= kPeers; ++r)
    for (std::uint64_t i = 0; i < 100; ++i)
      clients[r - 1]->async_send(0, CtrlMessage::from_tag(r * 1000 + i), asio::use_future);
  for (std::uint32_t r = 1; r <= kPeers; ++r)
    for (std::uint64_t i = 0; i < 100; ++i)
      ASSERT_EQ(server->async_recv(r, 10s, asio::use_future).get().tag(), r * 1000 + i);
  for (std::uint32_t r = 1; r <= kPeers; ++r) {
    server->async_send(r, CtrlMessage::from_tag(r), asio::use_future).get();
    EXPECT_EQ(clients[r - 1]->async_recv(0, 5s, asio::use_future).get().tag(), r);
  }
}

TEST_P(CtrlChannelTest, DuplicateRankIsRejectedAndTheFirstKeepsWorking) {
  test::LogCapture logs;
  CtrlChannel& first = client(3);
  CtrlChannel dup(loop, 3, options_for(GetParam(), dir));
  try {
    dup.async_connect("127.0.0.1", port, 5s, asio::use_future).get();
    FAIL() << "a second rank 3 must be rejected";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("duplicate rank 3"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(logs.has_error_containing("duplicate rank 3"));
  first.async_send(0, CtrlMessage::from_tag(1), asio::use_future).get();
  EXPECT_EQ(server->async_recv(3, 5s, asio::use_future).get().tag(), 1u);
}

TEST_P(CtrlChannelTest, OperationsOnAClosedChannelFailWithClosed) {
  server->close();
  server->close();  // idempotent
  EXPECT_THROW(server->async_recv(1, 1s, asio::use_future).get(), ClosedError);
  EXPECT_THROW(server->async_send(1, CtrlMessage::from_tag(1), asio::use_future).get(), ClosedError);
  EXPECT_THROW(server->async_connect("127.0.0.1", port, 1s, asio::use_future).get(), ClosedError);
}

TEST_P(CtrlChannelTest, OversizedMessageIsRejectedBeforeSending) {
  CtrlChannel& c = client(1);
  std::vector<std::byte> big((16u << 20) + 1);
  EXPECT_THROW(c.async_send(0, CtrlMessage::from_bytes(big), asio::use_future).get(), InvalidArgumentError);
  expect_server_healthy(2);
}

TEST_P(CtrlChannelTest, TransportMessagesGoToTheHandlerAndPeerEventsAreReported) {
  std::promise<std::pair<std::uint32_t, std::string>> bootstrap;
  std::promise<std::uint32_t> up, down;
  server->set_handlers(CtrlHandlers{
      [&](std::uint32_t rank, bool is_up) { (is_up ? up : down).set_value(rank); },
      [&](std::uint32_t rank, CtrlMessage m) {
        bootstrap.set_value({rank, std::string(reinterpret_cast<const char*>(m.bytes().data()), m.bytes().size())});
      },
      {}});
  CtrlChannel& c = client(4);
  EXPECT_EQ(up.get_future().get(), 4u);
  const std::string info = "worker address";
  c.async_send(0, CtrlMessage::from_transport(std::as_bytes(std::span(info.data(), info.size()))), asio::use_future)
      .get();
  c.async_send(0, CtrlMessage::from_tag(11), asio::use_future).get();
  EXPECT_EQ(bootstrap.get_future().get(), std::make_pair(4u, info));
  EXPECT_EQ(server->async_recv(4, 5s, asio::use_future).get().tag(), 11u)
      << "the transport message is not a user message";
  c.close();
  EXPECT_EQ(down.get_future().get(), 4u);
}

// Malformed input: each case closes only that connection, logs an error, and the server serves on.
struct Malformed {
  const char* name;
  const char* logged;
  std::vector<std::byte> (*bytes)();
  bool half_close;
};

std::vector<std::byte> header_with(std::uint32_t magic, std::uint8_t version, std::uint8_t type, std::uint32_t len) {
  std::vector<std::byte> b(detail::kFrameHeaderSize);
  detail::store_le32(b.data(), magic);
  b[4] = std::byte{version};
  b[5] = std::byte{type};
  detail::store_le32(b.data() + 8, len);
  return b;
}

const Malformed kMalformed[] = {
    {"bad magic", "bad magic", [] { return header_with(0xdeadbeef, 1, 1, 4); }, false},
    {"unknown version", "unknown protocol version 7", [] { return header_with(detail::kFrameMagic, 7, 1, 4); }, false},
    {"huge length", "exceeds the maximum",
     [] { return header_with(detail::kFrameMagic, detail::kFrameVersion, 4, 0xffffffffu); }, false},
    {"data before the handshake", "expected HELLO",
     [] {
       auto b = header_with(detail::kFrameMagic, detail::kFrameVersion, 3, 8);
       b.resize(b.size() + 8);
       return b;
     },
     false},
    {"truncated frame", "truncated frame",
     [] {
       auto b = header_with(detail::kFrameMagic, detail::kFrameVersion, 1, 4);
       b.push_back(std::byte{1});  // 1 of 4 payload bytes, then the sender half-closes
       return b;
     },
     true},
    {"garbage", "bad magic", [] { return std::vector<std::byte>(64, std::byte{0x5a}); }, false},
};

TEST_P(CtrlChannelTest, MalformedInputClosesOnlyThatConnection) {
  CtrlChannel& existing = client(1);
  std::uint32_t next_rank = 10;
  for (const Malformed& m : kMalformed) {
    SCOPED_TRACE(m.name);
    test::LogCapture logs;
    RawSocket s = raw();
    ASSERT_TRUE(s.connected());
    ASSERT_TRUE(s.send(m.bytes()));
    if (m.half_close) s.shutdown_write();
    std::vector<std::byte> got;
    EXPECT_TRUE(s.read_until_closed(got)) << "server must close a connection that sent " << m.name;
    EXPECT_TRUE(logs.has_error_containing(m.logged));
    expect_server_healthy(next_rank++);
  }
  existing.async_send(0, CtrlMessage::from_tag(77), asio::use_future).get();
  EXPECT_EQ(server->async_recv(1, 5s, asio::use_future).get().tag(), 77u);
}

// stats(): every message and byte each way, and each refused handshake under its reason.
TEST_P(CtrlChannelTest, StatsCountMessagesBothWaysAndRefusalsByReason) {
  CtrlChannel& c = client(1);
  const std::vector<std::byte> payload(100, std::byte{7});
  for (int i = 0; i < 10; ++i) c.async_send(0, CtrlMessage::from_bytes(payload), asio::use_future).get();
  for (int i = 0; i < 10; ++i) EXPECT_EQ(server->async_recv(1, 5s, asio::use_future).get().bytes().size(), 100u);
  EXPECT_EQ(c.stats().messages_sent, 10u);
  EXPECT_EQ(c.stats().bytes_sent, 1000u);
  EXPECT_EQ(server->stats().messages_received, 10u);
  EXPECT_EQ(server->stats().bytes_received, 1000u);
  EXPECT_EQ(server->stats().messages_sent, 0u);

  test::LogCapture logs;
  CtrlChannel dup(loop, 1, options_for(GetParam(), dir));
  EXPECT_THROW(dup.async_connect("127.0.0.1", port, 5s, asio::use_future).get(), ProtocolError);
  RawSocket garbage = raw();
  ASSERT_TRUE(garbage.send(header_with(0xdeadbeef, 1, 1, 4)));
  std::vector<std::byte> got;
  EXPECT_TRUE(garbage.read_until_closed(got));
  const CtrlStats s = server->stats();
  EXPECT_EQ(s.refused_rank, 1u);
  EXPECT_EQ(s.refused_protocol, 1u);
  EXPECT_EQ(s.refused_auth + s.refused_busy + s.refused_timeout + s.refused_transport, 0u);
}

// The data transport a client names travels in its authenticated HELLO (over a Unix-socket move
// too): both sides read it back; the server's admit_plane refuses one it cannot serve, and the
// client's connect raises that reason as UnsupportedError.
TEST_P(CtrlChannelTest, DataTransportIsNamedInTheHelloAndMayBeRefused) {
  std::vector<int> asked;
  server->set_handlers(CtrlHandlers{{}, {}, [&](std::uint8_t plane) {
                                      asked.push_back(plane);
                                      return plane == 1 ? std::string() : std::string("no fabric for plane 2 here");
                                    }});
  CtrlChannel one(loop, 1, options_for(GetParam(), dir));
  EXPECT_EQ(one.async_connect("127.0.0.1", port, 5s, 1, asio::use_future).get(), 0u);
  server->async_wait_peer(1, 5s, asio::use_future).get();
  EXPECT_EQ(server->plane_of(1), 1);
  EXPECT_EQ(one.plane_of(0), 1);
  EXPECT_EQ(server->transport_of(1), transport_name());

  test::LogCapture logs;
  CtrlChannel two(loop, 2, options_for(GetParam(), dir));
  try {
    two.async_connect("127.0.0.1", port, 5s, 2, asio::use_future).get();
    ADD_FAILURE() << "plane 2 was admitted";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("no fabric for plane 2 here"), std::string::npos) << e.what();
  }
  EXPECT_EQ(asked, (std::vector<int>{1, 2}));
  EXPECT_EQ(server->stats().refused_transport, 1u);
  EXPECT_EQ(server->plane_of(2), 0);
  EXPECT_THROW(two.async_connect("127.0.0.1", port, 5s, 16, asio::use_future).get(), InvalidArgumentError);
  // Plane 0 needs no admission; the rank refused a moment ago connects.
  EXPECT_EQ(two.async_connect("127.0.0.1", port, 5s, asio::use_future).get(), 0u);
  server->async_wait_peer(2, 5s, asio::use_future).get();
  EXPECT_EQ(server->plane_of(2), 0);
  EXPECT_EQ(asked.size(), 2u);
}

// A server with no admit_plane handler serves plane 0 only.
TEST_P(CtrlChannelTest, ServerWithoutAPlaneHandlerRefusesEveryOtherPlane) {
  test::LogCapture logs;
  CtrlChannel c(loop, 3, options_for(GetParam(), dir));
  EXPECT_THROW(c.async_connect("127.0.0.1", port, 5s, 1, asio::use_future).get(), UnsupportedError);
  EXPECT_EQ(server->stats().refused_transport, 1u);
  expect_server_healthy(4);
}

TEST_P(CtrlChannelTest, SilentConnectionIsDroppedAfterTheHelloTimeout) {
  test::LogCapture logs;
  RawSocket s = raw();
  ASSERT_TRUE(s.connected());
  std::vector<std::byte> got;
  EXPECT_TRUE(s.read_until_closed(got)) << "errno " << s.last_errno;
  EXPECT_TRUE(logs.has_error_containing("no complete handshake within"));
  const auto until = std::chrono::steady_clock::now() + 5s;  // counted once the handshake sees its deadline
  while (server->stats().refused_timeout == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(server->stats().refused_timeout, 1u);
  expect_server_healthy(2);
}

TEST_P(CtrlChannelTest, MalformedFrameFromAnEstablishedPeerEndsThatPeerOnly) {
  CtrlChannel& other = client(1);
  test::LogCapture logs;
  RawSocket s = RawSocket::tcp(port);  // a raw peer speaks TCP (the Unix socket is only for upgrades)
  const auto answer = s.handshake(test::key_bytes(kTestKey), 5);
  ASSERT_EQ(answer.header.type, detail::FrameType::welcome);
  server->async_wait_peer(5, 5s, asio::use_future).get();
  ASSERT_TRUE(s.send(header_with(0x01020304, detail::kFrameVersion, 3, 8)));
  std::vector<std::byte> got;
  EXPECT_TRUE(s.read_until_closed(got));
  EXPECT_THROW(server->async_recv(5, 5s, asio::use_future).get(), PeerLostError);
  EXPECT_TRUE(logs.has_error_containing("bad magic"));
  other.async_send(0, CtrlMessage::from_tag(8), asio::use_future).get();
  EXPECT_EQ(server->async_recv(1, 5s, asio::use_future).get().tag(), 8u);
}

INSTANTIATE_TEST_SUITE_P(Transports, CtrlChannelTest, ::testing::Values(CtrlTransport::tcp, CtrlTransport::uds),
                         [](const auto& p) { return p.param == CtrlTransport::tcp ? "tcp" : "uds"; });

TEST(CtrlChannelAuto, SameHostPeerUsesTheUnixSocketAndTcpWhenNoneIsOffered) {
  runtime::EventLoop loop;
  loop.start();
  const std::string dir = test::make_temp_dir();
  CtrlChannel uds_server(loop, 0, options_for(CtrlTransport::automatic, dir));
  const auto p1 = uds_server.listen("127.0.0.1", 0);
  CtrlChannel a(loop, 1, options_for(CtrlTransport::automatic, dir));
  a.async_connect("127.0.0.1", p1, 5s, asio::use_future).get();
  EXPECT_EQ(a.transport_of(0), "uds");

  CtrlChannel tcp_server(loop, 0, options_for(CtrlTransport::tcp, dir));  // offers no Unix socket
  const auto p2 = tcp_server.listen("127.0.0.1", 0);
  CtrlChannel b(loop, 1, options_for(CtrlTransport::automatic, dir));
  b.async_connect("127.0.0.1", p2, 5s, asio::use_future).get();
  EXPECT_EQ(b.transport_of(0), "tcp");
  std::filesystem::remove_all(dir);
}

TEST(CtrlOptions, EnvironmentSelectsTheTransport) {
  ::setenv("CTRL_TRANSPORT", "uds", 1);
  EXPECT_EQ(CtrlOptions::from_env().transport, CtrlTransport::uds);
  ::setenv("CTRL_TRANSPORT", "tcp", 1);
  EXPECT_EQ(CtrlOptions::from_env().transport, CtrlTransport::tcp);
  ::setenv("CTRL_TRANSPORT", "carrier-pigeon", 1);
  EXPECT_THROW(CtrlOptions::from_env(), InvalidConfigError);
  ::unsetenv("CTRL_TRANSPORT");
  EXPECT_EQ(CtrlOptions::from_env().transport, CtrlTransport::automatic);
}

}  // namespace
}  // namespace hmc
