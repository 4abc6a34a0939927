// Heartbeats and liveness: a silent (stopped) peer is declared lost, idle peers are not, a stalled
// large send does not starve liveness, and control sockets never leak into child processes.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "child_process.hpp"
#include "ctrl_test_util.hpp"
#include "hmc/ctrl_channel.hpp"

namespace hmc {
namespace {

using namespace std::chrono_literals;
namespace asio = runtime::asio;

CtrlOptions fast_liveness(const std::string& dir) {
  CtrlOptions o;
  o.transport = CtrlTransport::tcp;
  o.uds_dir = dir;
  o.heartbeat_interval = 200ms;
  o.heartbeat_misses = 5;  // lost after 1 s of silence
  return o;
}

long long ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t).count();
}

class CtrlLivenessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    loop.start();
    dir = test::make_temp_dir();
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
  runtime::EventLoop loop;
  std::string dir;
};

TEST_F(CtrlLivenessTest, AStoppedPeerIsLostWithinTheLimitThenItsRankReconnects) {
  CtrlChannel server(loop, 0, fast_liveness(dir));
  const auto port = server.listen("127.0.0.1", 0);
  // The peer runs with default heartbeats (1 s): the handshake agrees on the shorter 200 ms.
  auto peer = std::make_unique<test::ChildProcess>(
      std::vector<std::string>{HMC_CTRL_PEER_PATH, "127.0.0.1", std::to_string(port), "1", "0", "tcp"});
  ASSERT_EQ(peer->read_line(), "CONNECTED tcp");
  server.async_wait_peer(1, 5s, asio::use_future).get();
  std::this_thread::sleep_for(1500ms);  // longer than the limit: heartbeats keep an idle peer alive
  ASSERT_EQ(server.peers(), std::vector<std::uint32_t>{1});

  auto pending = server.async_recv(1, 10s, asio::use_future);
  peer->kill(SIGSTOP);  // its kernel still ACKs TCP, but the process sends nothing
  const auto stopped = std::chrono::steady_clock::now();
  EXPECT_THROW(pending.get(), PeerLostError) << "not TimeoutError: the loss must come from liveness";
  std::printf("stopped peer declared lost after %lld ms (limit 200 ms x 5)\n", ms_since(stopped));
  EXPECT_THROW(server.async_send(1, CtrlMessage::from_tag(1), asio::use_future).get(), PeerLostError);

  peer->kill(SIGCONT);  // it finds its connection closed and exits
  EXPECT_EQ(peer->wait(), 1);
  auto again = std::make_unique<test::ChildProcess>(
      std::vector<std::string>{HMC_CTRL_PEER_PATH, "127.0.0.1", std::to_string(port), "1", "3", "tcp"});
  ASSERT_EQ(again->read_line(), "CONNECTED tcp");
  for (std::uint64_t i = 0; i < 3; ++i) EXPECT_EQ(server.async_recv(1, 5s, asio::use_future).get().tag(), i);
  server.async_send(1, CtrlMessage::from_tag(9), asio::use_future).get();
  EXPECT_EQ(again->read_line(), "DONE");
  EXPECT_EQ(again->wait(), 0);
}

TEST_F(CtrlLivenessTest, AStalledLargeSendDoesNotStarveLivenessOnEitherSide) {
  CtrlOptions o = fast_liveness(dir);
  o.inbox_budget = 1u << 20;
  CtrlChannel server(loop, 0, o);
  const auto port = server.listen("127.0.0.1", 0);
  CtrlChannel client(loop, 1, o);
  client.async_connect("127.0.0.1", port, 5s, asio::use_future).get();
  // 32 MiB queued while the server does not receive: the server stops reading, the client's writes
  // (and so its heartbeats) stall behind the data for longer than the liveness limit.
  std::future<void> last;
  for (int i = 0; i < 32; ++i)
    last = client.async_send(0, CtrlMessage::from_bytes(std::vector<std::byte>(1u << 20)), asio::use_future);
  std::this_thread::sleep_for(2500ms);
  EXPECT_EQ(server.peers(), std::vector<std::uint32_t>{1}) << "a peer we stopped reading is not silent";
  EXPECT_EQ(client.peers(), std::vector<std::uint32_t>{0}) << "the server's heartbeats still reach the client";
  for (int i = 0; i < 32; ++i) ASSERT_EQ(server.async_recv(1, 10s, asio::use_future).get().bytes().size(), 1u << 20);
  last.get();
}

TEST_F(CtrlLivenessTest, HeartbeatsOffOnOneSideMeansOffOnBoth) {
  CtrlOptions off = fast_liveness(dir);
  off.heartbeat_interval = 0ms;
  CtrlChannel server(loop, 0, fast_liveness(dir));
  const auto port = server.listen("127.0.0.1", 0);
  CtrlChannel client(loop, 1, off);
  client.async_connect("127.0.0.1", port, 5s, asio::use_future).get();
  std::this_thread::sleep_for(1500ms);  // past the server's limit, with no heartbeat from the client
  EXPECT_EQ(server.peers(), std::vector<std::uint32_t>{1});
}

// Whether any fd of process `pid` is a socket.
bool holds_a_socket(pid_t pid) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    struct stat st {};
    if (::stat(e.path().c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) return true;
  }
  return false;
}

TEST_F(CtrlLivenessTest, AChildOfAPeerDoesNotHideThePeersDeath) {
  CtrlOptions o = fast_liveness(dir);
  o.heartbeat_interval = 0ms;  // only the socket's EOF can report the death within the receive timeout
  CtrlChannel server(loop, 0, o);
  const auto port = server.listen("127.0.0.1", 0);
  test::ChildProcess peer(
      std::vector<std::string>{HMC_CTRL_PEER_PATH, "127.0.0.1", std::to_string(port), "1", "0", "tcp", "spawn"});
  const std::string child_line = peer.read_line();
  ASSERT_EQ(child_line.rfind("CHILD ", 0), 0u) << child_line;
  const pid_t grandchild = std::stoi(child_line.substr(6));
  ASSERT_EQ(peer.read_line(), "CONNECTED tcp");
  server.async_wait_peer(1, 5s, asio::use_future).get();
  EXPECT_FALSE(holds_a_socket(grandchild)) << "the control socket leaked into an exec'd child";
  auto pending = server.async_recv(1, 5s, asio::use_future);
  peer.kill(SIGKILL);
  EXPECT_THROW(pending.get(), PeerLostError) << "the exec'd child keeps the socket open";
  ::kill(grandchild, SIGKILL);
}

TEST_F(CtrlLivenessTest, AChildOfAServerDoesNotKeepItsPortsBound) {
  CtrlOptions o = fast_liveness(dir);
  o.transport = CtrlTransport::automatic;
  auto server = std::make_unique<CtrlChannel>(loop, 0, o);
  const auto port = server->listen("127.0.0.1", 0);
  CtrlChannel c(loop, 1, o);
  c.async_connect("127.0.0.1", port, 5s, asio::use_future).get();
  ASSERT_EQ(c.transport_of(0), "uds");
  test::ChildProcess child(std::vector<std::string>{"/bin/sleep", "30"});
  ASSERT_TRUE(child.started());
  std::this_thread::sleep_for(100ms);  // let it exec
  EXPECT_FALSE(holds_a_socket(child.pid())) << "a control socket or acceptor leaked into an exec'd child";
  server.reset();
  // A listener inherited by the child would keep the port: binding it again would fail.
  asio::io_context io;
  asio::ip::tcp::acceptor again(io);
  runtime::error_code ec;
  again.open(asio::ip::tcp::v4(), ec);
  again.set_option(asio::ip::tcp::acceptor::reuse_address(true), ec);
  again.bind(asio::ip::tcp::endpoint(asio::ip::address_v4::loopback(), port), ec);
  if (!ec) again.listen(asio::socket_base::max_listen_connections, ec);
  EXPECT_FALSE(ec) << "port " << port << " still bound after the server closed: " << ec.message();
}

}  // namespace
}  // namespace hmc
