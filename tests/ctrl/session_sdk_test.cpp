// The Session's control-plane surface: the SDK form (assigned ranks, one public port), receiving
// before a peer connects, close_server, keys, and a silent peer failing the Session's operations.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "child_process.hpp"
#include "ctrl_test_util.hpp"
#include "hmc/session.hpp"

namespace hmc {
namespace {

using namespace std::chrono_literals;

std::vector<std::byte> pattern(std::uint64_t t, std::size_t n) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((t * 131 + i) & 0xff);
  return v;
}

bool holds(Session& s, std::uint64_t t, std::size_t n) {
  std::vector<std::byte> got(n);
  s.buffer().read_to_cpu(got.data(), n, 0);
  return got == pattern(t, n);
}

class SessionSdkTest : public ::testing::Test {
 protected:
  void SetUp() override { dir = test::make_temp_dir(); }
  void TearDown() override { std::filesystem::remove_all(dir); }
  SessionOptions options(const std::string& key = "session sdk test key") {
    SessionOptions o;
    o.buffer_size = 1u << 20;
    o.ucx_net_devices = "lo";
    o.timeout = 10s;
    o.auth_key = key;
    o.ctrl.uds_dir = dir;
    return o;
  }
  // Client puts pattern(t) at 0 and sends t; the server checks the bytes behind the tag.
  void put_and_tag(Session& client, Session& server, std::uint64_t t) {
    const auto p = pattern(t, 4096);
    client.buffer().write_from_cpu(p.data(), p.size(), 0);
    client.put(0, 0, 0, p.size());
    client.ctrl_send(0, t);
    EXPECT_EQ(server.ctrl_recv(client.rank(), 10s), t);
    EXPECT_TRUE(holds(server, t, 4096));
  }
  std::string dir;
};

TEST_F(SessionSdkTest, ClientsGetRanksInConnectionOrderAndConnectReturnsTheServersRank) {
  Session server(options());
  EXPECT_THROW(server.rank(), NotConnectedError);
  server.init_server("127.0.0.1", 0);
  EXPECT_EQ(server.rank(), 0u);
  const auto port = server.ctrl_port();
  Session a(options()), b(options());
  EXPECT_EQ(a.connect("127.0.0.1", port), 0u);
  EXPECT_EQ(b.connect("127.0.0.1", port), 0u);
  EXPECT_EQ(a.rank(), 1u);
  EXPECT_EQ(b.rank(), 2u);
  put_and_tag(b, server, 21);
  put_and_tag(a, server, 11);
  server.ctrl_send(1, 5);
  EXPECT_EQ(a.ctrl_recv(0, 10s), 5u);
}

TEST_F(SessionSdkTest, CtrlRecvForAPeerThatHasNotConnectedYetWaitsForIt) {
  Session server(options());
  server.init_server("127.0.0.1", 0);
  std::promise<std::uint64_t> got;
  std::thread receiver([&] {
    try {
      got.set_value(server.ctrl_recv(1, 20s));  // the README's receiver, written before any client
    } catch (...) {
      got.set_exception(std::current_exception());
    }
  });
  std::this_thread::sleep_for(200ms);
  Session client(options());
  client.connect("127.0.0.1", server.ctrl_port());
  client.ctrl_send(0, 42);
  EXPECT_EQ(got.get_future().get(), 42u);
  receiver.join();
  EXPECT_THROW(server.ctrl_recv(7, 50ms), TimeoutError);
}

TEST_F(SessionSdkTest, CloseServerKeepsConnectedPeersAndRefusesNewOnes) {
  Session server(options());
  server.init_server("127.0.0.1", 0);
  const auto port = server.ctrl_port();
  Session a(options());
  a.connect("127.0.0.1", port);
  server.close_server();
  put_and_tag(a, server, 3);
  server.ctrl_send(1, 4);
  EXPECT_EQ(a.ctrl_recv(0, 10s), 4u);
  SessionOptions brief = options();
  brief.timeout = 500ms;  // a refused connect is retried until the timeout
  Session late(brief);
  EXPECT_THROW(late.connect("127.0.0.1", port), NotConnectedError);
  server.close();
  EXPECT_THROW(a.ctrl_recv(0, 10s), PeerLostError);
}

TEST_F(SessionSdkTest, TheReadmeFormAcceptsAFullSocketPathAndExplicitRanks) {
  Session server(options());
  const std::string path = dir + "/hmc.sock";
  server.init_server("127.0.0.1", 2025, 0, 0, 0, path);
  EXPECT_TRUE(std::filesystem::is_socket(path));
  Session client(options());
  EXPECT_EQ(client.connect(0, 5, "127.0.0.1", 2025, server.ctrl_port()), 0u);
  EXPECT_EQ(client.rank(), 5u);
  put_and_tag(client, server, 8);
}

TEST_F(SessionSdkTest, SetLocalIpIsTheAddressTheServerKnowsItsClientBy) {
  Session server(options());
  server.init_server("127.0.0.1", 2025, 0, 0, 0);
  Session client(options());
  EXPECT_THROW(client.set_local_ip("0.0.0.0"), InvalidArgumentError);
  client.set_local_ip("127.0.0.7");
  EXPECT_EQ(client.connect(0, 1, "127.0.0.1", 2025, server.ctrl_port()), 0u);
  server.wait_peer(1, 10s);
  EXPECT_EQ(server.resolve_peer("127.0.0.7", std::nullopt), 1u);
  EXPECT_THROW(server.resolve_peer("127.0.0.1", std::nullopt), NotConnectedError);
}

TEST_F(SessionSdkTest, AWrongKeyIsAnAuthenticationError) {
  Session server(options("the right sdk test key"));
  server.init_server("127.0.0.1", 0);
  Session client(options("the wrong sdk test key"));
  EXPECT_THROW(client.connect("127.0.0.1", server.ctrl_port()), AuthenticationError);
  EXPECT_TRUE(server.peers().empty());
}

TEST_F(SessionSdkTest, ASilentPeerFailsThePendingRecvAndLaterSendsWithPeerLost) {
  SessionOptions o = options("");  // the key file, which the peer process reads too
  o.ctrl.heartbeat_interval = 200ms;
  o.ctrl.heartbeat_misses = 5;
  Session server(o);
  server.init_server("127.0.0.1", 0);
  test::ChildProcess peer(
      std::vector<std::string>{HMC_CTRL_PEER_PATH, "session", "127.0.0.1", std::to_string(server.ctrl_port())});
  ASSERT_EQ(peer.read_line(), "CONNECTED 1");
  server.wait_peer(1, 10s);
  server.ctrl_send(1, 17);
  EXPECT_EQ(server.ctrl_recv(1, 10s), 17u);
  EXPECT_TRUE(holds(server, 17, 4096));
  std::exception_ptr lost;
  std::thread receiver([&] {
    try {
      server.ctrl_recv(1, 9s);
    } catch (...) {
      lost = std::current_exception();
    }
  });
  std::this_thread::sleep_for(100ms);
  peer.kill(SIGSTOP);
  receiver.join();
  ASSERT_TRUE(lost);
  EXPECT_THROW(std::rethrow_exception(lost), PeerLostError);
  EXPECT_THROW(server.ctrl_send(1, 18), PeerLostError);
  peer.kill(SIGCONT);
  peer.kill(SIGKILL);
}

}  // namespace
}  // namespace hmc
