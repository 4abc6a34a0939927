// The authenticated handshake over real sockets: wrong keys, replays, squatters, rank assignment,
// and the bounds a server keeps before anyone has authenticated.
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "ctrl_test_util.hpp"
#include "hmc/ctrl_channel.hpp"
#include "wire/byte_order.hpp"

namespace hmc {
namespace {

using namespace std::chrono_literals;
namespace asio = runtime::asio;
using test::RawSocket;

CtrlOptions keyed(const std::string& key, const std::string& dir) {
  CtrlOptions o;
  o.transport = CtrlTransport::tcp;
  o.uds_dir = dir;
  o.auth_key = key;
  o.hello_timeout = 2s;
  return o;
}

class CtrlAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    loop.start();
    dir = test::make_temp_dir();
    server = std::make_unique<CtrlChannel>(loop, 0, keyed("the right test key", dir));
    server->set_handlers(CtrlHandlers{[this](std::uint32_t, bool up) {
                                        if (up) ++peers_up;
                                      },
                                      {},
                                      {}});
    port = server->listen("127.0.0.1", 0);
  }
  void TearDown() override {
    server.reset();
    std::filesystem::remove_all(dir);
  }
  std::unique_ptr<CtrlChannel> channel(std::uint32_t rank, const std::string& key = "the right test key") {
    return std::make_unique<CtrlChannel>(loop, rank, keyed(key, dir));
  }
  void expect_tag_both_ways(CtrlChannel& c, std::uint32_t rank) {
    c.async_send(0, CtrlMessage::from_tag(rank * 10), asio::use_future).get();
    EXPECT_EQ(server->async_recv(rank, 5s, asio::use_future).get().tag(), rank * 10);
    server->async_send(rank, CtrlMessage::from_tag(rank * 10 + 1), asio::use_future).get();
    EXPECT_EQ(c.async_recv(0, 5s, asio::use_future).get().tag(), rank * 10 + 1);
  }

  runtime::EventLoop loop;
  std::string dir;
  std::unique_ptr<CtrlChannel> server;
  std::uint16_t port = 0;
  std::atomic<int> peers_up{0};
};

TEST_F(CtrlAuthTest, AWrongKeyIsAnAuthenticationErrorAndOneServerLogLineAndNoPeer) {
  test::LogCapture logs;
  auto c = channel(1, "the wrong test key");
  const auto start = std::chrono::steady_clock::now();
  try {
    c->async_connect("127.0.0.1", port, 5s, asio::use_future).get();
    ADD_FAILURE() << "connected with a wrong key";
  } catch (const AuthenticationError& e) {
    // The client says why itself; the server's reason is in the server's log only.
    EXPECT_NE(std::string(e.what()).find("the two sides use different keys"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("HMC_AUTH_KEY_FILE"), std::string::npos) << e.what();
  }
  std::printf(
      "wrong key refused in %lld ms\n",
      static_cast<long long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count()));
  EXPECT_EQ(logs.count_errors_containing("ctrl handshake from"), 1);
  EXPECT_TRUE(logs.has_error_containing("the client's proof does not match our key"));
  EXPECT_TRUE(server->peers().empty());
  EXPECT_EQ(peers_up.load(), 0);
  EXPECT_EQ(server->stats().refused_auth, 1u);
  auto good = channel(1);
  EXPECT_EQ(good->async_connect("127.0.0.1", port, 5s, asio::use_future).get(), 0u);
  expect_tag_both_ways(*good, 1);
}

TEST_F(CtrlAuthTest, AServerThatCannotProveTheKeyIsRefusedByTheClient) {
  CtrlOptions o = keyed("", dir);
  o.authenticate = false;  // accepts anyone, proves nothing
  CtrlChannel open_server(loop, 0, o);
  const auto p = open_server.listen("127.0.0.1", 0);
  auto c = channel(1);
  try {
    c->async_connect("127.0.0.1", p, 5s, asio::use_future).get();
    FAIL() << "a server without the key must not be trusted";
  } catch (const AuthenticationError& e) {
    EXPECT_NE(std::string(e.what()).find("could not prove it holds our key"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(c->peers().empty());
}

TEST_F(CtrlAuthTest, OptingOutOnBothSidesConnectsAndOnOneSideDoesNot) {
  CtrlOptions o = keyed("", dir);
  o.authenticate = false;
  CtrlChannel open_server(loop, 0, o);
  const auto p = open_server.listen("127.0.0.1", 0);
  CtrlChannel open_client(loop, 1, o);
  EXPECT_EQ(open_client.async_connect("127.0.0.1", p, 5s, asio::use_future).get(), 0u);
  CtrlChannel half(loop, 2, o);
  try {
    half.async_connect("127.0.0.1", port, 5s, asio::use_future).get();
    ADD_FAILURE() << "a client without authentication reached a server that requires it";
  } catch (const AuthenticationError& e) {
    EXPECT_NE(std::string(e.what()).find("this side has it off"), std::string::npos) << e.what();
  }
}

TEST_F(CtrlAuthTest, BeforeAuthenticationTheServerSendsOnlyAChallengeAndAReject) {
  RawSocket s = RawSocket::tcp(port);
  const auto answer = s.handshake(test::key_bytes("a guess"), 1);
  EXPECT_EQ(answer.header.type, detail::FrameType::reject);
  std::vector<std::byte> rest;
  EXPECT_TRUE(s.read_until_closed(rest));
  EXPECT_TRUE(rest.empty()) << rest.size() << " more bytes after the REJECT";
  EXPECT_EQ(peers_up.load(), 0) << "on_peer (and so the Session's memory info) must not fire";
}

TEST_F(CtrlAuthTest, RecordedHandshakeBytesReplayedOnANewConnectionAreRejected) {
  std::vector<std::byte> recorded;
  {
    RawSocket good = RawSocket::tcp(port);
    ASSERT_EQ(good.handshake(test::key_bytes("the right test key"), 5, &recorded).header.type,
              detail::FrameType::welcome);
    server->async_wait_peer(5, 5s, asio::use_future).get();
  }
  // Wait until the server saw the recorder leave, so the rank is free again.
  for (int i = 0; i < 500 && !server->peers().empty(); ++i) std::this_thread::sleep_for(10ms);
  test::LogCapture logs;
  for (int replay = 0; replay < 5; ++replay) {
    RawSocket r = RawSocket::tcp(port);
    ASSERT_TRUE(r.send(recorded));
    detail::Frame f;
    ASSERT_TRUE(r.read_frame(f));
    EXPECT_EQ(f.header.type, detail::FrameType::challenge);
    ASSERT_TRUE(r.read_frame(f));
    EXPECT_EQ(f.header.type, detail::FrameType::reject) << "replay " << replay;
  }
  EXPECT_EQ(logs.count_errors_containing("does not match our key"), 5);
  EXPECT_TRUE(server->peers().empty());
}

TEST_F(CtrlAuthTest, SquattersWithoutTheKeyCannotTakeARank) {
  // One squatter says HELLO for rank 3 and never proves; another proves with a wrong key.
  RawSocket idle = RawSocket::tcp(port);
  detail::HelloMsg h;
  h.rank = 3;
  h.nonce = detail::random_nonce();
  ASSERT_TRUE(idle.send(detail::encode_frame(detail::FrameType::hello, detail::encode_hello(h))));
  RawSocket wrong = RawSocket::tcp(port);
  EXPECT_EQ(wrong.handshake(test::key_bytes("wrong"), 3).header.type, detail::FrameType::reject);
  auto owner = channel(3);
  EXPECT_EQ(owner->async_connect("127.0.0.1", port, 5s, asio::use_future).get(), 0u);
  expect_tag_both_ways(*owner, 3);
}

TEST_F(CtrlAuthTest, ASquatterWithTheKeyHoldsAFreeRankUntilItLeaves) {
  // Documented: a key holder is trusted; it can take any free rank first.
  RawSocket squatter = RawSocket::tcp(port);
  ASSERT_EQ(squatter.handshake(test::key_bytes("the right test key"), 4).header.type, detail::FrameType::welcome);
  server->async_wait_peer(4, 5s, asio::use_future).get();
  auto owner = channel(4);
  try {
    owner->async_connect("127.0.0.1", port, 5s, asio::use_future).get();
    FAIL() << "rank 4 is in use";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("duplicate rank 4"), std::string::npos) << e.what();
  }
  squatter = RawSocket::tcp(port);  // the squatter leaves
  for (int i = 0; i < 500 && !server->peers().empty(); ++i) std::this_thread::sleep_for(10ms);
  auto again = channel(4);
  EXPECT_EQ(again->async_connect("127.0.0.1", port, 5s, asio::use_future).get(), 0u);
}

TEST_F(CtrlAuthTest, AnyRankClientsGetOneTwoThreeInConnectionOrderSkippingRanksInUse) {
  auto fixed = channel(2);
  fixed->async_connect("127.0.0.1", port, 5s, asio::use_future).get();
  std::vector<std::unique_ptr<CtrlChannel>> any;
  for (int i = 0; i < 3; ++i) {
    any.push_back(channel(CtrlChannel::any_rank));
    EXPECT_EQ(any.back()->rank(), CtrlChannel::any_rank);
    EXPECT_EQ(any.back()->async_connect("127.0.0.1", port, 5s, asio::use_future).get(), 0u) << "the server's rank";
  }
  EXPECT_EQ(any[0]->rank(), 1u);
  EXPECT_EQ(any[1]->rank(), 3u);
  EXPECT_EQ(any[2]->rank(), 4u);
  for (auto& c : any) expect_tag_both_ways(*c, c->rank());
  // A lost rank is not handed out again: the next client gets a new one.
  any[0]->close();
  for (int i = 0; i < 500 && server->peers().size() != 3; ++i) std::this_thread::sleep_for(10ms);
  auto next = channel(CtrlChannel::any_rank);
  next->async_connect("127.0.0.1", port, 5s, asio::use_future).get();
  EXPECT_EQ(next->rank(), 5u);
}

TEST_F(CtrlAuthTest, OnlyTheNewestMaxConnectionsLossesAreRemembered) {
  CtrlOptions o = keyed("the right test key", dir);
  o.max_connections = 2;
  CtrlChannel srv(loop, 0, o);
  const auto p = srv.listen("127.0.0.1", 0);
  for (std::uint32_t r = 1; r <= 4; ++r) {
    CtrlChannel c(loop, CtrlChannel::any_rank, o);
    c.async_connect("127.0.0.1", p, 5s, asio::use_future).get();
    ASSERT_EQ(c.rank(), r);
    c.close();
    EXPECT_THROW(srv.async_recv(r, 5s, asio::use_future).get(), PeerLostError);
  }
  // Ranks 1 and 2 were forgotten (a receive waits for them again); 3 and 4 still answer PeerLost.
  EXPECT_THROW(srv.async_recv(1, 20ms, asio::use_future).get(), TimeoutError);
  EXPECT_THROW(srv.async_recv(4, 5s, asio::use_future).get(), PeerLostError);
}

TEST_F(CtrlAuthTest, AChannelWithoutARankCannotListen) {
  auto c = channel(CtrlChannel::any_rank);
  EXPECT_THROW(c->listen("127.0.0.1", 0), InvalidArgumentError);
}

// Whether `s` is still open and the server sent nothing on it (checked without waiting).
bool untouched(RawSocket& s) {
  pollfd p{s.fd(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

TEST_F(CtrlAuthTest, AFullHandshakeTableEvictsTheOldestAndAKeyHolderGetsIn) {
  CtrlOptions o = keyed("the right test key", dir);
  o.max_handshakes = 4;
  o.max_handshakes_per_source = 2;
  o.hello_timeout = 5s;
  CtrlChannel capped(loop, 0, o);
  const auto p = capped.listen("127.0.0.1", 0);
  test::LogCapture logs;
  std::vector<RawSocket> silent;  // accepted in this order
  for (const char* source : {"127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.3"})
    silent.push_back(RawSocket::tcp_from(source, p));  // the table is full
  for (const char* source : {"127.0.0.4", "127.0.0.4"})
    silent.push_back(RawSocket::tcp_from(source, p));  // each evicts the oldest: both of 127.0.0.2
  for (int i = 0; i < 3; ++i)
    silent.push_back(RawSocket::tcp_from("127.0.0.3", p));  // 127.0.0.3 is at its cap: its oldest go
  for (auto& s : silent) ASSERT_TRUE(s.connected());
  CtrlChannel key_holder(loop, 1, o);  // evicts the oldest of all, the first of 127.0.0.4
  key_holder.async_connect("127.0.0.1", p, 5s, asio::use_future).get();
  const std::vector<bool> evicted{true, true, true, true, true, false, true, false, false};
  for (std::size_t i = 0; i < silent.size(); ++i) {
    if (!evicted[i]) {
      EXPECT_TRUE(untouched(silent[i])) << "connection " << i << " was not the oldest";
      continue;
    }
    std::vector<std::byte> got;
    EXPECT_TRUE(silent[i].read_until_closed(got)) << "connection " << i;
    EXPECT_FALSE(got.empty()) << "connection " << i << " was closed without a REJECT saying why";
  }
  EXPECT_TRUE(logs.has_line_containing("(max_handshakes 4)"));
  EXPECT_TRUE(logs.has_line_containing("too many handshakes from 127.0.0.3 (max_handshakes_per_source 2)"));
  EXPECT_EQ(capped.stats().refused_busy, 6u);  // the six evicted
  key_holder.async_send(0, CtrlMessage::from_tag(1), asio::use_future).get();
  EXPECT_EQ(capped.async_recv(1, 5s, asio::use_future).get().tag(), 1u);
}

TEST_F(CtrlAuthTest, ConnectionsThatSentNothingWholeAreEvictedBeforeOneThatSentAHello) {
  CtrlOptions o = keyed("the right test key", dir);
  o.max_handshakes = 4;
  o.hello_timeout = 5s;
  CtrlChannel capped(loop, 0, o);
  const auto p = capped.listen("127.0.0.1", 0);
  RawSocket spoke = RawSocket::tcp(p);
  detail::HelloMsg h;
  h.rank = 9;
  h.nonce = detail::random_nonce();
  ASSERT_TRUE(spoke.send(detail::encode_frame(detail::FrameType::hello, detail::encode_hello(h))));
  detail::Frame challenge;
  ASSERT_TRUE(spoke.read_frame(challenge));  // the server has read the HELLO
  ASSERT_EQ(challenge.header.type, detail::FrameType::challenge);
  std::vector<RawSocket> idle;
  for (int i = 0; i < 10; ++i) {
    idle.push_back(RawSocket::tcp(p));
    ASSERT_TRUE(idle.back().send("\x01", 1));  // not a whole frame
  }
  CtrlChannel key_holder(loop, 1, o);
  key_holder.async_connect("127.0.0.1", p, 5s, asio::use_future).get();
  EXPECT_TRUE(untouched(spoke)) << "a connection that sent a HELLO was evicted before idle ones";
  for (std::size_t i = 0; i < idle.size(); ++i) {
    if (i >= 8) {  // the two newest idle ones, with the HELLO and the key holder, filled the table
      EXPECT_TRUE(untouched(idle[i])) << "idle connection " << i;
      continue;
    }
    std::vector<std::byte> got;
    EXPECT_TRUE(idle[i].read_until_closed(got)) << "idle connection " << i;
  }
}

TEST_F(CtrlAuthTest, AuthenticatedPeersAreNeverEvictedAndABusyClientRetriesUntilItsTimeout) {
  CtrlOptions o = keyed("the right test key", dir);
  o.max_handshakes = 4;
  o.max_connections = 3;
  CtrlChannel capped(loop, 0, o);
  const auto p = capped.listen("127.0.0.1", 0);
  std::vector<std::unique_ptr<CtrlChannel>> peers;
  for (std::uint32_t r = 1; r <= 3; ++r) {
    peers.push_back(std::make_unique<CtrlChannel>(loop, r, o));
    peers.back()->async_connect("127.0.0.1", p, 5s, asio::use_future).get();
  }
  CtrlChannel fourth(loop, 4, o);
  try {
    fourth.async_connect("127.0.0.1", p, 300ms, asio::use_future).get();
    FAIL() << "every connection slot is held by an authenticated peer";
  } catch (const NotConnectedError& e) {
    EXPECT_NE(std::string(e.what()).find("too many connections (max_connections 3)"), std::string::npos) << e.what();
  }
  // A busy server is asked again until the client's own deadline: a slot that frees up lets it in.
  auto late = fourth.async_connect("127.0.0.1", p, 10s, asio::use_future);
  std::this_thread::sleep_for(200ms);
  peers[2]->close();
  late.get();
  for (std::uint32_t r : {1u, 2u, 4u}) {
    CtrlChannel& c = r == 4 ? fourth : *peers[r - 1];
    c.async_send(0, CtrlMessage::from_tag(r), asio::use_future).get();
    EXPECT_EQ(capped.async_recv(r, 5s, asio::use_future).get().tag(), r);
  }
}

// Returns once `sent` made no progress for 500 ms (at most 20 s).
void wait_until_stalled(const std::atomic<int>& sent) {
  int last = -1;
  for (int i = 0; i < 40 && sent.load() != last; ++i) {
    last = sent.load();
    std::this_thread::sleep_for(500ms);
  }
}

TEST_F(CtrlAuthTest, AFullInboxStopsReadingAndTheSenderWaitsThenEverythingArrivesInOrder) {
  CtrlOptions o = keyed("the right test key", dir);
  o.inbox_budget = 1u << 20;
  CtrlChannel srv(loop, 0, o);
  const auto p = srv.listen("127.0.0.1", 0);
  CtrlChannel c(loop, 1, o);
  c.async_connect("127.0.0.1", p, 5s, asio::use_future).get();
  constexpr int kMessages = 128;  // 128 x 512 KiB = 64 MiB, far beyond the kernel's socket buffers
  std::atomic<int> sent{0};
  for (int i = 0; i < kMessages; ++i) {
    std::vector<std::byte> m(512u << 10, static_cast<std::byte>(i));
    c.async_send(0, CtrlMessage::from_bytes(m), [&](std::exception_ptr e) {
      if (!e) ++sent;
    });
  }
  wait_until_stalled(sent);  // the receiver is not reading
  std::printf("with a 1 MiB inbox budget, %d of %d sends of 512 KiB reached the kernel before the receiver drained\n",
              sent.load(), kMessages);
  EXPECT_LT(sent.load(), kMessages) << "the receiver kept reading past its inbox budget";
  for (int i = 0; i < kMessages; ++i) {
    const CtrlMessage m = srv.async_recv(1, 10s, asio::use_future).get();
    ASSERT_EQ(m.bytes().size(), 512u << 10);
    ASSERT_EQ(m.bytes()[0], static_cast<std::byte>(i));
  }
  for (int i = 0; i < 500 && sent.load() != kMessages; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(sent.load(), kMessages);
  EXPECT_EQ(srv.peers(), std::vector<std::uint32_t>{1}) << "backpressure must not cost the connection";
}

// All inboxes together stay bounded: with a 2 MiB total, four peers that send 16 MiB each without
// being received stop being read, while a fifth, whose messages are received, keeps flowing.
TEST_F(CtrlAuthTest, AllInboxesTogetherStopAtTheirTotalAndAReceivedPeerStillFlows) {
  CtrlOptions o = keyed("the right test key", dir);
  o.inbox_budget = 64u << 20;  // no single peer reaches its own budget
  o.total_inbox_budget = 2u << 20;
  CtrlChannel srv(loop, 0, o);
  const auto p = srv.listen("127.0.0.1", 0);
  constexpr int kHoarders = 4, kMessages = 32;  // 32 x 512 KiB each, far beyond the socket buffers
  std::vector<std::unique_ptr<CtrlChannel>> hoarders;
  std::atomic<int> sent{0};
  for (int h = 0; h < kHoarders; ++h) {
    hoarders.push_back(std::make_unique<CtrlChannel>(loop, static_cast<std::uint32_t>(h + 1), o));
    hoarders.back()->async_connect("127.0.0.1", p, 5s, asio::use_future).get();
    for (int i = 0; i < kMessages; ++i) {
      std::vector<std::byte> m(512u << 10, static_cast<std::byte>(i));
      hoarders.back()->async_send(0, CtrlMessage::from_bytes(m), [&](std::exception_ptr e) {
        if (!e) ++sent;
      });
    }
  }
  wait_until_stalled(sent);
  std::printf("with a 2 MiB total inbox budget, %d of %d sends of 512 KiB from %d peers reached the kernel\n",
              sent.load(), kHoarders * kMessages, kHoarders);
  EXPECT_LT(sent.load(), kHoarders * kMessages) << "the receiver kept reading past the total inbox budget";

  CtrlChannel fifth(loop, 9, o);
  fifth.async_connect("127.0.0.1", p, 5s, asio::use_future).get();
  for (std::uint64_t i = 0; i < 20; ++i) {
    fifth.async_send(0, CtrlMessage::from_tag(i), asio::use_future).get();
    EXPECT_EQ(srv.async_recv(9, 5s, asio::use_future).get().tag(), i);
  }

  for (int h = 0; h < kHoarders; ++h)
    for (int i = 0; i < kMessages; ++i) {
      const CtrlMessage m = srv.async_recv(static_cast<std::uint32_t>(h + 1), 10s, asio::use_future).get();
      ASSERT_EQ(m.bytes().size(), 512u << 10);
      ASSERT_EQ(m.bytes()[0], static_cast<std::byte>(i));
    }
  for (int i = 0; i < 500 && sent.load() != kHoarders * kMessages; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(sent.load(), kHoarders * kMessages);
  EXPECT_EQ(srv.peers().size(), kHoarders + 1u) << "backpressure must not cost a connection";
}

TEST_F(CtrlAuthTest, APartialFrameThatStallsIsClosed) {
  CtrlOptions o = keyed("the right test key", dir);
  o.heartbeat_interval = 0ms;  // liveness off: only the partial-frame timeout can act
  o.partial_frame_timeout = 300ms;
  CtrlChannel srv(loop, 0, o);
  const auto p = srv.listen("127.0.0.1", 0);
  test::LogCapture logs;
  RawSocket s = RawSocket::tcp(p);
  ASSERT_EQ(s.handshake(test::key_bytes("the right test key"), 1).header.type, detail::FrameType::welcome);
  detail::FrameHeader h;
  h.length = 1000;
  const auto hb = detail::encode_header(h);
  ASSERT_TRUE(s.send(hb.data(), hb.size()));
  ASSERT_TRUE(s.send(std::vector<std::byte>(10)));
  std::vector<std::byte> got;
  EXPECT_TRUE(s.read_until_closed(got));
  EXPECT_TRUE(logs.has_error_containing("partial frame (10 of 1000 payload bytes) idle"));
  EXPECT_THROW(srv.async_recv(1, 5s, asio::use_future).get(), PeerLostError);
}

TEST_F(CtrlAuthTest, AHelloLargerThanAHandshakeFrameIsRefusedBeforeItsBytesArrive) {
  test::LogCapture logs;
  RawSocket s = RawSocket::tcp(port);
  detail::FrameHeader h;
  h.type = detail::FrameType::hello;
  h.length = 16u << 20;
  const auto hb = detail::encode_header(h);
  ASSERT_TRUE(s.send(hb.data(), hb.size()));
  std::vector<std::byte> got;
  EXPECT_TRUE(s.read_until_closed(got));
  EXPECT_TRUE(logs.has_error_containing("exceeds the maximum 512"));
}

}  // namespace
}  // namespace hmc
