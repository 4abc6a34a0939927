// Control channel across two processes: ordering, and a peer killed with SIGKILL mid-stream.
#include <gtest/gtest.h>

#include <chrono>

#include "child_process.hpp"
#include "ctrl_test_util.hpp"
#include "hmc/ctrl_channel.hpp"

namespace hmc {
namespace {

using namespace std::chrono_literals;
namespace asio = runtime::asio;

class CtrlProcessTest : public ::testing::TestWithParam<CtrlTransport> {
 protected:
  void SetUp() override {
    loop.start();
    dir = test::make_temp_dir();
    CtrlOptions o;
    o.transport = GetParam();
    o.uds_dir = dir;
    server = std::make_unique<CtrlChannel>(loop, 0, o);
    port = server->listen("127.0.0.1", 0);
    ::setenv("HMC_CTRL_UDS_DIR", dir.c_str(), 1);
  }
  void TearDown() override {
    server.reset();
    std::filesystem::remove_all(dir);
  }
  std::unique_ptr<test::ChildProcess> spawn_peer(std::uint32_t rank, long long tags) {
    const std::string t = GetParam() == CtrlTransport::uds ? "uds" : "tcp";
    auto child = std::make_unique<test::ChildProcess>(std::vector<std::string>{
        HMC_CTRL_PEER_PATH, "127.0.0.1", std::to_string(port), std::to_string(rank), std::to_string(tags), t});
    EXPECT_TRUE(child->started());
    EXPECT_EQ(child->read_line(), "CONNECTED " + t);
    server->async_wait_peer(rank, 10s, asio::use_future).get();
    return child;
  }

  runtime::EventLoop loop;
  std::string dir;
  std::unique_ptr<CtrlChannel> server;
  std::uint16_t port = 0;
};

TEST_P(CtrlProcessTest, HundredThousandTagsFromAnotherProcessArriveInOrder) {
  constexpr std::uint64_t kTags = test::kManyTags;
  auto child = spawn_peer(1, kTags);
  auto received = asio::co_spawn(
      loop.executor(),
      [&]() -> asio::awaitable<std::uint64_t> {
        for (std::uint64_t i = 0; i < kTags; ++i)
          if ((co_await server->async_recv(1, 20s, asio::use_awaitable)).tag() != i) co_return i;
        co_return kTags;
      },
      asio::use_future);
  ASSERT_EQ(received.wait_for(120s), std::future_status::ready);
  EXPECT_EQ(received.get(), kTags);
  server->async_send(1, CtrlMessage::from_tag(0), asio::use_future).get();
  EXPECT_EQ(child->read_line(), "DONE");
  EXPECT_EQ(child->wait(), 0);
}

TEST_P(CtrlProcessTest, PeerKilledMidStreamFailsItsReceivesAndSparesTheOthers) {
  CtrlOptions o;
  o.transport = GetParam();
  o.uds_dir = dir;
  CtrlChannel bystander(loop, 2, o);
  bystander.async_connect("127.0.0.1", port, 5s, asio::use_future).get();
  auto child = spawn_peer(1, -1);  // sends tags until killed
  for (std::uint64_t i = 0; i < 2000; ++i) ASSERT_EQ(server->async_recv(1, 10s, asio::use_future).get().tag(), i);
  child->kill(SIGKILL);
  EXPECT_EQ(child->wait(), 128 + SIGKILL);
  // Tags already received still come out in order; then the receive fails with PeerLostError.
  const auto start = std::chrono::steady_clock::now();
  std::uint64_t expected = 2000;
  bool lost = false;
  while (!lost && std::chrono::steady_clock::now() - start < 10s) {
    try {
      ASSERT_EQ(server->async_recv(1, 5s, asio::use_future).get().tag(), expected++);
    } catch (const PeerLostError&) {
      lost = true;
    }
  }
  EXPECT_TRUE(lost) << "the survivor's receive must fail with PeerLostError, not hang";
  // Sending to the dead peer fails cleanly (no SIGPIPE), and the other peer is untouched.
  EXPECT_THROW(server->async_send(1, CtrlMessage::from_tag(1), asio::use_future).get(), PeerLostError);
  bystander.async_send(0, CtrlMessage::from_tag(99), asio::use_future).get();
  EXPECT_EQ(server->async_recv(2, 5s, asio::use_future).get().tag(), 99u);
  server->async_send(2, CtrlMessage::from_tag(100), asio::use_future).get();
  EXPECT_EQ(bystander.async_recv(0, 5s, asio::use_future).get().tag(), 100u);
}

TEST_P(CtrlProcessTest, ServerSendingIntoAKilledPeerSurvives) {
  auto child = spawn_peer(1, 0);  // connects, sends nothing, waits for our tag
  child->kill(SIGKILL);
  child->wait();
  // Keep sending until the loss is noticed: EPIPE/ECONNRESET must surface as PeerLostError.
  bool lost = false;
  for (int i = 0; i < 100'000 && !lost; ++i) {
    try {
      server->async_send(1, CtrlMessage::from_bytes(std::vector<std::byte>(4096)), asio::use_future).get();
    } catch (const PeerLostError&) {
      lost = true;
    }
  }
  EXPECT_TRUE(lost);
}

INSTANTIATE_TEST_SUITE_P(Transports, CtrlProcessTest, ::testing::Values(CtrlTransport::tcp, CtrlTransport::uds),
                         [](const auto& p) { return p.param == CtrlTransport::tcp ? "tcp" : "uds"; });

}  // namespace
}  // namespace hmc
