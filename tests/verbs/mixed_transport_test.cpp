// One session serving UCX and RDMA clients at once, each client choosing its transport in the
// handshake. Run twice: "emulated" over the in-process EMULATED verbs fabric (always), "device" over
// rdma-core and the first RDMA device (skipped with the reason where none exists). UCX runs for real
// over shared memory either way.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <future>
#include <vector>

#include "../session/session_test_util.hpp"
#include "emulated_verbs.hpp"
#include "hmc/error.hpp"
#include "hmc/session.hpp"
#include "verbs_test_util.hpp"

namespace hmc {
namespace {

using namespace std::chrono_literals;
using test::fill;
using test::holds;

constexpr std::size_t kBuffer = 4u << 20;
constexpr std::uint16_t kUcxPort = 18600;
constexpr std::uint16_t kRdmaPort = 18601;

class MixedSession : public ::testing::TestWithParam<const char*> {
 protected:
  bool emulated() const { return std::string(GetParam()) == "emulated"; }
  SessionOptions options() const {
    SessionOptions o;
    o.buffer_size = kBuffer;
    o.verbs_emulation = emulated();
    o.timeout = 10s;
    o.ctrl.uds_dir = dir;
    return o;
  }
  void SetUp() override {
    if (const std::string why = test::rdma_skip_reason(emulated()); !why.empty()) GTEST_SKIP() << why;
    dir = test::temp_dir();
    server = std::make_unique<Session>(options());  // UCX by default; RDMA for the first client that asks
    server->init_server("127.0.0.1", kUcxPort, kRdmaPort, 0, 0, dir);
    ucx = std::make_unique<Session>(options());
    rdma = std::make_unique<Session>(options());
    ASSERT_EQ(ucx->connect(0, 1, "127.0.0.1", kUcxPort, server->ctrl_port(), ConnType::UCX), 0u);
    ASSERT_EQ(rdma->connect(0, 2, "127.0.0.1", kRdmaPort, server->ctrl_port(), ConnType::RDMA), 0u);
    server->wait_peer(1, 10s);
    server->wait_peer(2, 10s);
  }
  void TearDown() override {
    rdma.reset();
    ucx.reset();
    server.reset();
    if (!dir.empty()) std::filesystem::remove_all(dir);
  }
  std::string rc() const { return emulated() ? "rc-emulated" : "rc"; }

  std::string dir;
  std::unique_ptr<Session> server, ucx, rdma;
};

TEST_P(MixedSession, EachPeerIsCarriedByTheTransportItsClientChose) {
  EXPECT_EQ(server->conn_type(), ConnType::UCX);
  EXPECT_EQ(server->peer_conn(1), ConnType::UCX);
  EXPECT_EQ(server->peer_conn(2), ConnType::RDMA);
  EXPECT_EQ(ucx->peer_conn(0), ConnType::UCX);
  EXPECT_EQ(rdma->peer_conn(0), ConnType::RDMA);
  EXPECT_EQ(server->transports(2), rc());
  EXPECT_EQ(rdma->transports(0), rc());
  EXPECT_EQ(server->transports(1).find("rc"), std::string::npos) << server->transports(1);
  // Each client names the server by its own transport's port.
  EXPECT_EQ(ucx->resolve_peer("127.0.0.1", kUcxPort), 0u);
  EXPECT_EQ(rdma->resolve_peer("127.0.0.1", kRdmaPort), 0u);
  EXPECT_THROW((void)rdma->resolve_peer("127.0.0.1", kUcxPort), NotConnectedError);
  EXPECT_THROW((void)server->peer_conn(7), NotConnectedError);
}

TEST_P(MixedSession, PutsAndGetsBothWaysOverBothTransportsAtOnce) {
  constexpr std::size_t n = 512u << 10;
  fill(ucx->buffer(), 0, n, 11);
  fill(rdma->buffer(), 0, n, 22);
  fill(server->buffer(), 2 * n, n, 33);
  fill(server->buffer(), 3 * n, n, 44);
  // The clients put into two regions of the server and read two others, all in flight together.
  std::vector<std::future<void>> ops;
  ops.push_back(ucx->put_nb(0, 0, 0, n));
  ops.push_back(rdma->put_nb(0, 0, n, n));
  ops.push_back(ucx->get_nb(0, n, 2 * n, n));
  ops.push_back(rdma->get_nb(0, n, 3 * n, n));
  for (auto& f : ops) f.get();
  EXPECT_TRUE(holds(server->buffer(), 0, n, 11));
  EXPECT_TRUE(holds(server->buffer(), n, n, 22));
  EXPECT_TRUE(holds(ucx->buffer(), n, n, 33));
  EXPECT_TRUE(holds(rdma->buffer(), n, n, 44));
  // The server starts operations to both clients, each over its own transport.
  ops.clear();
  ops.push_back(server->put_nb(1, 2 * n, 2 * n, n));
  ops.push_back(server->put_nb(2, 3 * n, 2 * n, n));
  ops.push_back(server->get_nb(1, 4 * n, 0, n));
  ops.push_back(server->get_nb(2, 5 * n, 0, n));
  for (auto& f : ops) f.get();
  EXPECT_TRUE(holds(ucx->buffer(), 2 * n, n, 33));
  EXPECT_TRUE(holds(rdma->buffer(), 2 * n, n, 44));
  EXPECT_TRUE(holds(server->buffer(), 4 * n, n, 11));
  EXPECT_TRUE(holds(server->buffer(), 5 * n, n, 22));
  // Control messages and notifies reach the right peer over either transport.
  ucx->ctrl_send(0, 101);
  rdma->ctrl_send(0, 202);
  EXPECT_EQ(server->ctrl_recv(1, 5s), 101u);
  EXPECT_EQ(server->ctrl_recv(2, 5s), 202u);
  fill(rdma->buffer(), 0, 4096, 55);
  rdma->put_notify(0, 0, 6 * n, 4096, 303);
  EXPECT_EQ(server->ctrl_recv(2, 5s), 303u);
  EXPECT_TRUE(holds(server->buffer(), 6 * n, 4096, 55));
  const SessionStats s = server->stats();
  EXPECT_EQ(s.peers_connected, 2u);
}

TEST_P(MixedSession, AConnThatDoesNotCarryThePeerIsATypedErrorNamingBoth) {
  EXPECT_NO_THROW(server->check_conn(1, ConnType::UCX));
  EXPECT_NO_THROW(server->check_conn(2, ConnType::RDMA));
  try {
    server->check_conn(2, ConnType::UCX);
    ADD_FAILURE() << "UCX accepted for an RDMA peer";
  } catch (const InvalidArgumentError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("conn=ConnType.UCX"), std::string::npos) << what;
    EXPECT_NE(what.find("over ConnType.RDMA"), std::string::npos) << what;
  }
  EXPECT_THROW(server->check_conn(1, ConnType::RDMA), InvalidArgumentError);
  EXPECT_THROW(ucx->check_conn(0, ConnType::RDMA), InvalidArgumentError);
  EXPECT_NO_THROW(server->check_conn(9, ConnType::RDMA));  // not connected: the operation says so
}

// Registered memory predates the RDMA transport's set-up and has ids that no longer start at 1:
// the RDMA plane, built for the first RDMA client, registers it under its own ids.
TEST_P(MixedSession, MemoryRegisteredBeforeTheRdmaTransportExistedMovesOverIt) {
  Session late(options());
  std::vector<std::byte> gone(4096), mem(64u << 10);
  { RegisteredMemory r = late.register_memory(gone.data(), gone.size()); }
  RegisteredMemory r = late.register_memory(mem.data(), mem.size());
  ASSERT_EQ(late.connect(0, 3, "127.0.0.1", kRdmaPort, server->ctrl_port(), ConnType::RDMA), 0u);
  for (std::size_t i = 0; i < mem.size(); ++i) mem[i] = static_cast<std::byte>(i * 7);
  late.async_put_from(r, 0, 0, 100000, mem.size(), runtime::asio::use_future).get();
  std::vector<std::byte> seen(mem.size());
  server->buffer().read_to_cpu(seen.data(), seen.size(), 100000);
  EXPECT_EQ(seen, mem);
  fill(server->buffer(), 200000, 1000, 66);
  late.async_get_into(r, 5, 0, 200000, 1000, runtime::asio::use_future).get();
  EXPECT_TRUE(std::equal(mem.begin() + 5, mem.begin() + 1005, test::pattern(1000, 66).begin()));
}

TEST_P(MixedSession, DisconnectThenConnectOverTheOtherTransport) {
  for (ConnType next : {ConnType::RDMA, ConnType::UCX, ConnType::RDMA}) {
    ucx->disconnect(0);
    const std::uint16_t port = next == ConnType::RDMA ? kRdmaPort : kUcxPort;
    ASSERT_EQ(ucx->connect(0, 1, "127.0.0.1", port, server->ctrl_port(), next), 0u);
    server->wait_peer(1, 10s);
    EXPECT_EQ(ucx->peer_conn(0), next);
    EXPECT_EQ(server->peer_conn(1), next);
    EXPECT_EQ(ucx->transports(0) == rc(), next == ConnType::RDMA) << ucx->transports(0);
    const std::uint8_t value = next == ConnType::RDMA ? 77 : 88;
    fill(ucx->buffer(), 0, 100000, value);
    ucx->put(0, 0, 300000, 100000);
    EXPECT_TRUE(holds(server->buffer(), 300000, 100000, value));
    ucx->get(0, 200000, 300000, 100000);
    EXPECT_TRUE(holds(ucx->buffer(), 200000, 100000, value));
  }
  EXPECT_EQ(server->peer_conn(2), ConnType::RDMA);  // the other client never noticed
  rdma->put(0, 0, 0, 4096);
}

INSTANTIATE_TEST_SUITE_P(Fabric, MixedSession, ::testing::Values("emulated", "device"));

// A server that cannot serve RDMA (no device, no emulation) refuses an RDMA client in the handshake,
// with its reason, at once; its UCX clients are unaffected.
TEST(MixedConfig, AServerWithoutRdmaRefusesAnRdmaClientWithItsReason) {
  if (test::rdma_device_present()) GTEST_SKIP() << "an RDMA device is present: the server could serve RDMA";
  const std::string dir = test::temp_dir();
  SessionOptions so;
  so.buffer_size = 1u << 20;
  so.ctrl.uds_dir = dir;
  Session server(so);
  server.init_server("127.0.0.1", kUcxPort, kRdmaPort, 0, 0, dir);
  SessionOptions co = so;
  co.verbs_emulation = true;  // this side has RDMA; the server has none
  Session client(co), other(so);
  const auto start = std::chrono::steady_clock::now();
  try {
    client.connect(0, 1, "127.0.0.1", kRdmaPort, server.ctrl_port(), ConnType::RDMA);
    ADD_FAILURE() << "an RDMA client was served by a server without RDMA";
  } catch (const UnsupportedError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("serves no RDMA"), std::string::npos) << what;
    EXPECT_NE(what.find("no RDMA device found"), std::string::npos) << what;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);  // refused, not timed out (timeout 30 s)
  EXPECT_EQ(server.stats().ctrl.refused_transport, 1u);
  EXPECT_EQ(other.connect(0, 2, "127.0.0.1", kUcxPort, server.ctrl_port(), ConnType::UCX), 0u);
  fill(other.buffer(), 0, 1000, 5);
  other.put(0, 0, 0, 1000);
  EXPECT_TRUE(holds(server.buffer(), 0, 1000, 5));
  // The refused client connects over UCX instead.
  EXPECT_EQ(client.connect(0, 1, "127.0.0.1", kUcxPort, server.ctrl_port(), ConnType::UCX), 0u);
  EXPECT_EQ(client.peer_conn(0), ConnType::UCX);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hmc
