// ConnType::RDMA end to end: Sessions over the VerbsTransport, run twice. "emulated": over the
// in-process EMULATED fabric (tests/emulation/emulated_verbs.hpp, in the test library), always;
// "device": over rdma-core and the first RDMA device (HMC_RDMA_DEVICE picks another), skipped with
// the reason where ibv_get_device_list lists none. Fault injection needs the emulation: those cases
// run only there.
#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <filesystem>
#include <future>
#include <thread>

#include "../session/session_test_util.hpp"
#include "emulated_verbs.hpp"
#include "hmc/error.hpp"
#include "hmc/memory.hpp"
#include "hmc/runtime/event_loop.hpp"
#include "verbs/verbs_peer_info.hpp"
#include "verbs/verbs_transport.hpp"
#include "verbs_test_util.hpp"

namespace hmc {
namespace {

using namespace std::chrono_literals;
using test::fill;
using test::holds;

constexpr std::size_t kBuffer = 4u << 20;
constexpr std::uint16_t kRdmaPort = 18516;

SessionOptions rdma_options(bool emulated, const std::string& dir, std::chrono::milliseconds timeout = 10s) {
  SessionOptions o;
  o.buffer_size = kBuffer;
  o.conn_type = ConnType::RDMA;
  o.verbs_emulation = emulated;
  o.progress_mode = runtime::ProgressMode::event;  // the loop sleeps on the CQ channel: the arm contract matters
  o.timeout = timeout;
  o.ctrl.uds_dir = dir;
  return o;
}

template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 5s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

class VerbsSession : public ::testing::TestWithParam<const char*> {
 protected:
  bool emulated() const { return std::string(GetParam()) == "emulated"; }
  void SetUp() override {
    if (const std::string why = test::rdma_skip_reason(emulated()); !why.empty()) GTEST_SKIP() << why;
    if (emulated()) fabric = detail::EmulatedFabric::shared();
    dir = test::temp_dir();
    start(10s);
  }
  void start(std::chrono::milliseconds timeout) {
    server = std::make_unique<Session>(rdma_options(emulated(), dir, timeout));
    server->init_server("127.0.0.1", 0, kRdmaPort, 0, 0, dir);  // only an rdma_port: it serves RDMA
    // The client is a UCX session by default: connect(..., RDMA) sets up verbs for this peer.
    SessionOptions co = rdma_options(emulated(), dir, timeout);
    co.conn_type = ConnType::UCX;
    client = std::make_unique<Session>(co);
    ASSERT_EQ(client->connect(0, 1, "127.0.0.1", kRdmaPort, server->ctrl_port(), ConnType::RDMA), 0u);
    server->wait_peer(1, 10s);
  }
  void TearDown() override {
    if (fabric) fabric->reset_faults();
    client.reset();
    server.reset();
    if (!dir.empty()) std::filesystem::remove_all(dir);
    if (fabric) {
      EXPECT_EQ(fabric->stats().cq_overflows, 0u);
      EXPECT_EQ(fabric->stats().sq_overflows, 0u);
    }
  }
  void need_emulation() {
    if (!emulated()) GTEST_SKIP() << "fault injection needs the emulated fabric";
  }

  std::shared_ptr<detail::EmulatedFabric> fabric;
  std::string dir;
  std::unique_ptr<Session> server, client;
};

TEST_P(VerbsSession, ConnectsOverRdma) {
  EXPECT_EQ(client->conn_type(), ConnType::UCX);  // its default; this peer is on RDMA
  EXPECT_EQ(client->peer_conn(0), ConnType::RDMA);
  EXPECT_EQ(server->conn_type(), ConnType::RDMA);  // only an rdma_port
  EXPECT_EQ(server->peer_conn(1), ConnType::RDMA);
  EXPECT_EQ(client->transports(0), emulated() ? "rc-emulated" : "rc");
  EXPECT_EQ(client->resolve_peer("127.0.0.1", kRdmaPort), 0u);  // known by its rdma_port
}

TEST_P(VerbsSession, PutAndGetMoveBytesBothWays) {
  for (std::size_t n : {std::size_t{1}, std::size_t{4097}, std::size_t{1} << 20}) {
    fill(client->buffer(), 0, n, n);
    client->put(0, 0, 100, n);
    EXPECT_TRUE(holds(server->buffer(), 100, n, n)) << n;
    fill(server->buffer(), 2u << 20, n, n + 1);
    client->get(0, 8, 2u << 20, n);
    EXPECT_TRUE(holds(client->buffer(), 8, n, n + 1)) << n;
    fill(server->buffer(), 0, n, n + 2);
    server->put(1, 0, 3u << 20, n);  // the server's side of the same QPs
    EXPECT_TRUE(holds(client->buffer(), 3u << 20, n, n + 2)) << n;
  }
}

TEST_P(VerbsSession, BatchAndPipeline) {
  std::vector<Segment> segs;
  for (std::size_t i = 0; i < 64; ++i) {
    fill(client->buffer(), i * 4096, 1000, i);
    segs.push_back(Segment{i * 4096, (1u << 20) + i * 4096, 1000});
  }
  client->put_batch(0, segs);
  for (std::size_t i = 0; i < 64; ++i) EXPECT_TRUE(holds(server->buffer(), (1u << 20) + i * 4096, 1000, i)) << i;
  fill(server->buffer(), 0, 3u << 20, 77);
  client->get_pipeline(0, 0, 0, 3u << 20, 256u << 10, 4);
  EXPECT_TRUE(holds(client->buffer(), 0, 3u << 20, 77));
  fill(client->buffer(), 0, 3u << 20, 78);
  client->put_pipeline(0, 0, 1u << 20, 3u << 20, 100000, 3);
  EXPECT_TRUE(holds(server->buffer(), 1u << 20, 3u << 20, 78));
}

TEST_P(VerbsSession, UserMemoryIsRegisteredForRdma) {
  std::vector<std::byte> mine = test::pattern(50000, 9);
  RegisteredMemory reg = client->register_memory(mine.data(), mine.size());
  client->async_put_from(reg, 0, 0, 1000, mine.size(), runtime::asio::use_future).get();
  EXPECT_TRUE(holds(server->buffer(), 1000, mine.size(), 9));
  std::fill(mine.begin(), mine.end(), std::byte{0});
  client->async_get_into(reg, 0, 0, 1000, mine.size(), runtime::asio::use_future).get();
  EXPECT_EQ(mine, test::pattern(50000, 9));
}

TEST_P(VerbsSession, ControlMessagesTakeTheFastPathInOrderAfterTheData) {
  // Tags and a message larger than a receive buffer (fragmented over SENDs), in order, each
  // after the put before it is visible.
  for (std::uint64_t i = 0; i < 200; ++i) {
    fill(client->buffer(), 0, 64, i);
    client->put(0, 0, 0, 64);
    client->ctrl_send(0, i);
    EXPECT_EQ(server->ctrl_recv(1, 5s), i);
    EXPECT_TRUE(holds(server->buffer(), 0, 64, i));
  }
  const std::vector<std::byte> big = test::pattern(100000, 3);
  client->async_ctrl_send(0, CtrlMessage::from_bytes(big), runtime::asio::use_future).get();
  client->ctrl_send(0, 7);
  auto got = server->async_ctrl_recv(1, 5s, runtime::asio::use_future).get();
  EXPECT_TRUE(std::equal(got.bytes().begin(), got.bytes().end(), big.begin(), big.end()));
  EXPECT_EQ(server->ctrl_recv(1, 5s), 7u);
}

TEST_P(VerbsSession, PutNotifyTagsArriveAfterTheirBytes) {
  // Eight put_notify in flight at a time, each to its own region; every tag finds its bytes.
  constexpr std::size_t kRegion = 64u << 10;
  for (std::uint64_t round = 0; round < 25; ++round) {
    std::vector<std::future<void>> ops;
    for (std::uint64_t k = 0; k < 8; ++k) {
      fill(client->buffer(), k * kRegion, kRegion, round * 8 + k);
      ops.push_back(client->async_put_notify(0, k * kRegion, k * kRegion, kRegion, CtrlMessage::from_tag(round * 8 + k),
                                             runtime::asio::use_future));
    }
    for (std::uint64_t k = 0; k < 8; ++k) {
      const std::uint64_t tag = server->ctrl_recv(1, 5s);
      EXPECT_EQ(tag, round * 8 + k);
      EXPECT_TRUE(holds(server->buffer(), (tag % 8) * kRegion, kRegion, tag)) << tag;
    }
    for (auto& op : ops) op.get();
  }
}

TEST_P(VerbsSession, ManySmallWritesWaitForQueueAndCqRoomInsteadOfOverflowing) {
  // 6000 work requests: more than the send queue (256) and the CQ (4096) hold.
  std::vector<Segment> segs;
  for (std::size_t i = 0; i < 6000; ++i) segs.push_back(Segment{i * 16, i * 16, 16});
  fill(client->buffer(), 0, 6000 * 16, 5);
  client->put_batch(0, segs);
  EXPECT_TRUE(holds(server->buffer(), 0, 6000 * 16, 5));
  std::vector<std::future<void>> gets;
  for (std::size_t i = 0; i < 2000; ++i) gets.push_back(client->get_nb(0, (1u << 20) + i * 8, i * 8, 8));
  client->wait(gets, 20s);
}

TEST_P(VerbsSession, AnErrorCompletionFailsTheOperationWithATypedErrorAndDropsThePeer) {
  need_emulation();
  fabric->fail_next(IBV_WC_REM_ACCESS_ERR);
  EXPECT_THROW(client->get(0, 0, 0, 64), ProtocolError);
  // An RC QP in the error state is a lost connection: both sides drop the peer.
  EXPECT_TRUE(eventually([&] { return client->peers().empty(); }));
  EXPECT_THROW(client->put(0, 0, 0, 64), NotConnectedError);
  EXPECT_TRUE(eventually([&] { return server->peers().empty(); }));
}

TEST_P(VerbsSession, AFailedUnsignalledWriteFailsThePutThroughItsFlush) {
  need_emulation();
  fabric->fail_next(IBV_WC_REM_ACCESS_ERR);
  EXPECT_THROW(client->put(0, 0, 0, 64), ProtocolError);
  EXPECT_TRUE(eventually([&] { return client->peers().empty(); }));
}

TEST_P(VerbsSession, AQpErrorFailsOperationsInFlightWithPeerLost) {
  need_emulation();
  fabric->set_delay(300ms);
  auto put = client->put_nb(0, 0, 0, 4096);
  auto get = client->get_nb(0, 8192, 0, 4096);
  fabric->break_all_qps();
  EXPECT_THROW(client->wait(put, 5s), PeerLostError);
  EXPECT_THROW(client->wait(get, 5s), PeerLostError);
  EXPECT_TRUE(eventually([&] { return client->peers().empty() && server->peers().empty(); }));
}

TEST_P(VerbsSession, ADelayedCompletionTimesOutAndTheConnectionStaysUsable) {
  need_emulation();
  client.reset();
  server.reset();
  start(300ms);
  fabric->set_delay(800ms);
  EXPECT_THROW(client->get(0, 0, 0, 64), TimeoutError);
  fabric->set_delay(0ms);
  fill(server->buffer(), 0, 64, 11);
  // The late completion arrives and is dropped quietly; the QP keeps working.
  EXPECT_TRUE(eventually([&] {
    try {
      client->get(0, 0, 0, 64);
      return true;
    } catch (const TimeoutError&) {
      return false;
    }
  }));
  EXPECT_TRUE(holds(client->buffer(), 0, 64, 11));
}

TEST_P(VerbsSession, PeerLossFailsItsOperationsWithPeerLost) {
  need_emulation();
  fabric->set_delay(300ms);
  auto put = client->put_nb(0, 0, 0, 4096);
  server.reset();
  EXPECT_THROW(client->wait(put, 5s), PeerLostError);
  EXPECT_TRUE(eventually([&] { return client->peers().empty(); }));
}

TEST_P(VerbsSession, ClosingWithOperationsInFlightFailsThemAndFreesEverything) {
  need_emulation();
  // Longer than close's goodbye (2 s), which lets shorter operations finish: these fail instead.
  fabric->set_delay(4s);
  std::vector<std::future<void>> ops;
  for (std::size_t i = 0; i < 100; ++i) {
    ops.push_back(client->put_nb(0, i * 64, i * 64, 64));
    ops.push_back(client->get_nb(0, (1u << 20) + i * 64, i * 64, 64));
  }
  ops.push_back(client->async_ctrl_send(0, CtrlMessage::from_tag(1), runtime::asio::use_future));
  client.reset();
  for (auto& op : ops) {
    ASSERT_EQ(op.wait_for(5s), std::future_status::ready);
    // The Session closes its control channel first (peers go down: PeerLostError), as over UCX.
    try {
      op.get();
      ADD_FAILURE() << "an operation in flight at close succeeded";
    } catch (const ClosedError&) {
    } catch (const PeerLostError&) {
    }
  }
  server.reset();
  EXPECT_TRUE(eventually([&] { return fabric->stats().qps == 0; }));
}

INSTANTIATE_TEST_SUITE_P(Fabric, VerbsSession, ::testing::Values("emulated", "device"));

TEST(VerbsConfig, WithoutADeviceOrEmulationRdmaIsUnsupportedAndSaysWhy) {
  if (test::rdma_device_present()) GTEST_SKIP() << "an RDMA device is present";
  const std::string dir = test::temp_dir();
  try {
    Session s(rdma_options(false, dir));
    ADD_FAILURE() << "a session with conn_type RDMA started without a device";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("no RDMA device found"), std::string::npos) << e.what();
  }
  SessionOptions o = rdma_options(false, dir);
  o.conn_type = ConnType::UCX;
  Session s(o);
  EXPECT_THROW(s.connect(0, 1, "127.0.0.1", 1, 1, ConnType::RDMA), UnsupportedError);
  EXPECT_EQ(s.conn_type(), ConnType::UCX);  // still a usable UCX session
  std::filesystem::remove_all(dir);
}

// num_chs QPs per peer: operations spread over them, a flush covers every QP a put used, and
// control messages keep their order on QP 0. Both sides must agree on the count.
TEST(VerbsChannels, SeveralQpsPerPeerKeepPutSemanticsAndMismatchedCountsRefuse) {
  const std::string dir = test::temp_dir();
  SessionOptions o = rdma_options(true, dir);
  o.num_chs = 3;
  Session server(o), client(o);
  server.init_server("127.0.0.1", 0, kRdmaPort, 0, 0, dir);
  ASSERT_EQ(client.connect(0, 1, "127.0.0.1", kRdmaPort, server.ctrl_port(), ConnType::RDMA), 0u);
  std::vector<Segment> segs;
  for (std::size_t i = 0; i < 30; ++i) segs.push_back(Segment{i * 1000, 100000 + i * 1000, 1000});
  fill(client.buffer(), 0, 30000, 21);
  for (int round = 0; round < 20; ++round) {
    fill(client.buffer(), 0, 30000, 21 + round);
    client.put_batch(0, segs);
    client.ctrl_send(0, round);
    EXPECT_EQ(server.ctrl_recv(1, 5s), static_cast<std::uint64_t>(round));
    EXPECT_TRUE(holds(server.buffer(), 100000, 30000, 21 + round));
  }
  // Successive ops take successive QPs: a notify after a put on QP 1 or 2 waits for its flush there.
  for (std::uint64_t round = 0; round < 30; ++round) {
    fill(client.buffer(), 0, 30000, 50 + round);
    client.put_notify(0, 0, 100000, 30000, round);
    EXPECT_EQ(server.ctrl_recv(1, 5s), round);
    EXPECT_TRUE(holds(server.buffer(), 100000, 30000, 50 + round)) << round;
  }
  fill(server.buffer(), 0, 1u << 20, 8);
  client.get_pipeline(0, 0, 0, 1u << 20, 4096, 16);
  EXPECT_TRUE(holds(client.buffer(), 0, 1u << 20, 8));

  SessionOptions other = o;
  other.num_chs = 2;
  other.timeout = 1s;
  Session odd(other);
  // Refused at bootstrap: PeerLostError whether the refusal comes before or after connect() starts
  // waiting for the data connection (never its timeout).
  EXPECT_THROW(odd.connect(0, 2, "127.0.0.1", kRdmaPort, server.ctrl_port(), ConnType::RDMA), PeerLostError);
  EXPECT_EQ(server.peers(), std::vector<std::uint32_t>{1});
  std::filesystem::remove_all(dir);
}

// Striping, over the emulation with num_chs = 1, 2, 3: a segment of at least stripe_min bytes is
// cut into one contiguous piece per QP (the fabric's largest WRITE / READ shows the cut), and the
// operation completes once, after every piece, with every byte in place.
class VerbsStriping : public ::testing::TestWithParam<std::size_t> {
 protected:
  static constexpr std::size_t kMin = detail::VerbsOptions::kDefaultStripeMin;

  void SetUp() override {
    dir = test::temp_dir();
    SessionOptions o = rdma_options(true, dir);
    o.num_chs = GetParam();
    server = std::make_unique<Session>(o);
    client = std::make_unique<Session>(o);
    server->init_server("127.0.0.1", 0, kRdmaPort, 0, 0, dir);
    ASSERT_EQ(client->connect(0, 1, "127.0.0.1", kRdmaPort, server->ctrl_port(), ConnType::RDMA), 0u);
    server->wait_peer(1, 10s);
    (void)fabric->take_largest_rdma();
  }
  void TearDown() override {
    fabric->reset_faults();
    client.reset();
    server.reset();
    std::filesystem::remove_all(dir);
    EXPECT_EQ(fabric->stats().cq_overflows, 0u);
    EXPECT_EQ(fabric->stats().sq_overflows, 0u);
  }
  // The largest work request a segment of n bytes may take: a whole segment, or its largest piece.
  std::size_t piece(std::size_t n) const {
    const std::size_t chs = GetParam();
    return chs > 1 && n >= kMin ? (n + chs - 1) / chs : n;
  }

  std::shared_ptr<detail::EmulatedFabric> fabric = detail::EmulatedFabric::shared();
  std::string dir;
  std::unique_ptr<Session> server, client;
};

TEST_P(VerbsStriping, PutsAndGetsAroundTheThresholdMoveEveryByte) {
  for (std::size_t n : {kMin - 1, kMin, kMin + 1, 3 * kMin + 2, std::size_t{1} << 20 | 5}) {
    fill(client->buffer(), 3, n, n);
    client->put(0, 3, 1000001, n);
    EXPECT_TRUE(holds(server->buffer(), 1000001, n, n)) << n;
    EXPECT_EQ(fabric->take_largest_rdma(), piece(n)) << n;
    fill(server->buffer(), 2000003, n, n + 1);
    client->get(0, 7, 2000003, n);
    EXPECT_TRUE(holds(client->buffer(), 7, n, n + 1)) << n;
    EXPECT_EQ(fabric->take_largest_rdma(), piece(n)) << n;
  }
  // Several striped segments of one operation (one engine token, posted once per segment), listed
  // backwards so that the batch does not merge them into one.
  const std::size_t n = 2 * kMin + 1;
  std::vector<Segment> segs;
  for (std::size_t i = 4; i-- > 0;) segs.push_back(Segment{i * n, (2u << 20) + i * n, n});
  fill(client->buffer(), 0, 4 * n, 31);
  client->put_batch(0, segs);
  EXPECT_TRUE(holds(server->buffer(), 2u << 20, 4 * n, 31));
  fill(server->buffer(), 2u << 20, 4 * n, 32);
  client->get_batch(0, segs);
  EXPECT_TRUE(holds(client->buffer(), 0, 4 * n, 32));
  // Pipelines: every chunk of stripe_min bytes or more is striped (signalled puts, then one flush).
  fill(client->buffer(), 0, 3u << 20, 33);
  client->put_pipeline(0, 0, 1u << 20, 3u << 20, kMin + 3, 4);
  EXPECT_TRUE(holds(server->buffer(), 1u << 20, 3u << 20, 33));
  fill(server->buffer(), 5, (3u << 20) - 5, 34);
  client->get_pipeline(0, 1, 5, (3u << 20) - 5, 3 * kMin, 3);
  EXPECT_TRUE(holds(client->buffer(), 1, (3u << 20) - 5, 34));
  EXPECT_EQ(fabric->take_largest_rdma(), piece(3 * kMin));
}

TEST_P(VerbsStriping, PutNotifyTagsFollowEveryPieceOfAStripedPut) {
  // Eight put_notify in flight at a time, each to its own region and each followed by a ctrl_send:
  // every tag finds every byte of its region, whichever QP carried which piece, and messages keep
  // their posting order. Striped regions make every notify wait for flush READs; regions under the
  // threshold take the QPs in turn, so notifies that wait and notifies that need not alternate.
  for (const std::size_t region : {3 * kMin + 1, kMin / 2 + 1}) {
    for (std::uint64_t round = 0; round < 12; ++round) {
      std::vector<std::future<void>> ops;
      for (std::uint64_t k = 0; k < 8; ++k) {
        const std::uint64_t tag = round * 8 + k;
        fill(client->buffer(), k * region, region, tag);
        ops.push_back(client->async_put_notify(0, k * region, k * region, region, CtrlMessage::from_tag(tag),
                                               runtime::asio::use_future));
        ops.push_back(client->async_ctrl_send(0, CtrlMessage::from_tag(tag | 1u << 31), runtime::asio::use_future));
      }
      for (std::uint64_t k = 0; k < 8; ++k) {
        const std::uint64_t tag = server->ctrl_recv(1, 5s);
        EXPECT_EQ(tag, round * 8 + k) << region;
        EXPECT_TRUE(holds(server->buffer(), (tag % 8) * region, region, tag)) << region << " " << tag;
        EXPECT_EQ(server->ctrl_recv(1, 5s), (round * 8 + k) | 1u << 31) << region;
      }
      for (auto& op : ops) op.get();
    }
  }
}

TEST_P(VerbsStriping, AnErrorOnAnyPieceFailsTheOperationOnce) {
  // The piece that fails is the first, a middle or the last one executed: the get never succeeds
  // on the pieces that went through, and fails once with the failed piece's error.
  const std::size_t chs = GetParam();
  for (std::size_t bad = 0; bad < chs; ++bad) {
    if (bad != 0) {  // the failure broke the connection: a fresh pair
      client.reset();
      server.reset();
      std::filesystem::remove_all(dir);
      SetUp();
    }
    fabric->fail_next(IBV_WC_REM_ACCESS_ERR, 1, static_cast<int>(bad));
    EXPECT_THROW(client->get(0, 0, 0, 3 * kMin), ProtocolError) << "piece " << bad;
    EXPECT_TRUE(eventually([&] { return client->peers().empty(); }));
  }
}

INSTANTIATE_TEST_SUITE_P(Channels, VerbsStriping, ::testing::Values(std::size_t{1}, std::size_t{2}, std::size_t{3}));

// The transport alone, over the emulation: what a hostile bootstrap message can do.
class VerbsBootstrap : public ::testing::Test {
 protected:
  void SetUp() override {
    loop.start();
    loop.call([&] {
      a = std::make_unique<detail::VerbsTransport>(loop, fabric, buffer_a, detail::VerbsOptions{});
      b = std::make_unique<detail::VerbsTransport>(loop, fabric, buffer_b, detail::VerbsOptions{});
      a->attach();
      b->attach();
    });
  }
  void TearDown() override {
    loop.call([&] {
      a.reset();
      b.reset();
    });
    loop.stop();
  }
  std::vector<std::byte> info_of_b() {
    return loop.call([&] { return b->local_info(0, detail::LocalAddress{1, "127.0.0.1", 1, ""}); });
  }
  std::string add_to_a(std::span<const std::byte> bytes) {
    return loop.call([&] {
      (void)a->local_info(1, detail::LocalAddress{0, "127.0.0.1", 1, ""});
      return a->add_peer(1, bytes);
    });
  }

  std::shared_ptr<detail::EmulatedFabric> fabric = detail::EmulatedFabric::shared();
  runtime::EventLoop loop;
  ConnBuffer buffer_a{std::shared_ptr<Memory>(Memory::create(MemoryType::CPU)), 1u << 16};
  ConnBuffer buffer_b{std::shared_ptr<Memory>(Memory::create(MemoryType::CPU)), 1u << 16};
  std::unique_ptr<detail::VerbsTransport> a, b;
};

TEST_F(VerbsBootstrap, TruncatedOversizedAndInconsistentInfoIsRefusedWithAReason) {
  const std::vector<std::byte> good = info_of_b();
  for (std::size_t n = 0; n < good.size(); ++n)
    EXPECT_FALSE(add_to_a(std::span(good).first(n)).empty()) << "a prefix of " << n << " bytes was accepted";
  std::vector<std::byte> longer = good;
  longer.push_back(std::byte{0});
  EXPECT_NE(add_to_a(longer).find("trailing"), std::string::npos);
  detail::VerbsPeerInfo info;
  ASSERT_EQ(detail::VerbsPeerInfo::decode(good, info), "");
  auto variant = [&](auto change) {
    detail::VerbsPeerInfo v = info;
    change(v);
    return add_to_a(v.encode());
  };
  EXPECT_NE(variant([](auto& v) { v.rank = 5; }).find("names rank 5"), std::string::npos);
  EXPECT_NE(variant([](auto& v) { v.qp_nums.assign(65, 1); }).find("65 QPs"), std::string::npos);
  EXPECT_NE(variant([](auto& v) { v.qp_nums.clear(); }).find("0 QPs"), std::string::npos);
  EXPECT_NE(variant([](auto& v) { v.qp_nums.push_back(1); }).find("num_chs must match"), std::string::npos);
  EXPECT_NE(variant([](auto& v) { v.mtu = 9; }).find("MTU"), std::string::npos);
  EXPECT_NE(variant([](auto& v) { v.buffer_base = ~std::uint64_t{0}; }).find("wraps"), std::string::npos);
  EXPECT_TRUE(loop.call([&] { return a->ranks().empty(); }));
}

TEST_F(VerbsBootstrap, AnRkeyOrRangeTheNicRefusesFailsTheOperationAndDropsThePeer) {
  detail::VerbsPeerInfo info;
  ASSERT_EQ(detail::VerbsPeerInfo::decode(info_of_b(), info), "");
  info.rkey += 1000;            // not b's key
  info.buffer_size = 1u << 30;  // claims more than b registered
  const std::vector<std::byte> a_info = loop.call([&] { return a->local_info(1, detail::LocalAddress{0, "", 0, ""}); });
  std::promise<std::uint32_t> failed;
  loop.call([&] {
    a->on_peer_failed = [&](std::uint32_t rank, runtime::error_code) { failed.set_value(rank); };
    ASSERT_EQ(a->add_peer(1, info.encode()), "");
    ASSERT_EQ(b->add_peer(0, a_info), "");
  });
  std::promise<runtime::error_code> done;
  loop.call([&] {
    static const Segment seg{0, 1u << 20, 64};  // the request borrows it until submit() returns
    detail::OpRequest r;
    r.rank = 1;
    r.kind = detail::OpKind::get;
    r.segments = std::span<const Segment>(&seg, 1);
    a->submit(std::move(r), [&](runtime::error_code ec) { done.set_value(ec); });
  });
  auto ec = done.get_future();
  ASSERT_EQ(ec.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(ec.get(), make_error_code(Status::PROTOCOL_ERROR));
  auto rank = failed.get_future();
  ASSERT_EQ(rank.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(rank.get(), 1u);
  EXPECT_TRUE(loop.call([&] { return a->ranks().empty(); }));
}

}  // namespace
}  // namespace hmc

namespace hmc {
namespace {

// The emulation itself keeps the verbs contracts the transport relies on (and the real stack has).
TEST(EmulatedFabric, ChannelEventsFollowTheArmContractAndUnackedEventsBlockDestroy) {
  detail::EmulatedFabric f;
  ibv_context* ctx = f.open_device(detail::EmulatedFabric::kDeviceName);
  ASSERT_NE(ctx, nullptr);
  ibv_pd* pd = f.alloc_pd(ctx);
  ibv_comp_channel* ch = f.create_comp_channel(ctx);
  ibv_cq* cq = f.create_cq(ctx, 16, ch);
  std::vector<std::byte> mem(4096);
  ibv_mr* mr = f.reg_mr(pd, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = init.cap.max_recv_wr = 4;
  ibv_qp* a = f.create_qp(pd, init);
  ibv_qp* b = f.create_qp(pd, init);
  for (auto [q, peer] : {std::pair{a, b}, std::pair{b, a}}) {
    ibv_qp_attr s{};
    s.qp_state = IBV_QPS_INIT;
    ASSERT_EQ(f.modify_qp(q, s, IBV_QP_STATE), 0);
    s.qp_state = IBV_QPS_RTR;
    s.dest_qp_num = peer->qp_num;
    ASSERT_EQ(f.modify_qp(q, s, IBV_QP_STATE | IBV_QP_DEST_QPN), 0);
    s.qp_state = IBV_QPS_RTS;
    ASSERT_EQ(f.modify_qp(q, s, IBV_QP_STATE), 0);
  }
  auto write = [&](std::uint64_t id) {
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(mem.data()), 8, mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = id;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = reinterpret_cast<std::uintptr_t>(mem.data() + 64);
    wr.wr.rdma.rkey = mr->rkey;
    ibv_send_wr* bad = nullptr;
    return f.post_send(a, &wr, &bad);
  };
  auto readable = [&](int ms) {
    pollfd p{ch->fd, POLLIN, 0};
    return ::poll(&p, 1, ms) == 1;
  };
  ibv_wc wc{};
  // Not armed: the completion arrives, the channel stays silent.
  ASSERT_EQ(write(1), 0);
  ASSERT_TRUE(eventually([&] { return f.poll_cq(cq, 1, &wc) == 1; }));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_FALSE(readable(50));
  // Armed: exactly one event for the next completion, then EAGAIN.
  ASSERT_EQ(f.req_notify_cq(cq, 0), 0);
  ASSERT_EQ(write(2), 0);
  ASSERT_TRUE(readable(5000));
  ibv_cq* got = nullptr;
  ASSERT_EQ(f.get_cq_event(ch, &got), 0);
  EXPECT_EQ(got, cq);
  EXPECT_EQ(f.get_cq_event(ch, &got), -1);
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_FALSE(readable(0));
  ASSERT_EQ(write(3), 0);  // not re-armed: no event
  ASSERT_TRUE(eventually([&] { return f.poll_cq(cq, 1, &wc) == 1 && wc.wr_id == 2; }));
  ASSERT_TRUE(eventually([&] { return f.poll_cq(cq, 1, &wc) == 1 && wc.wr_id == 3; }));
  EXPECT_FALSE(readable(50));
  // A full send queue refuses the post (nothing retired while its completions are unpolled).
  for (int i = 0; i < 4; ++i) ASSERT_EQ(write(10 + i), 0);
  EXPECT_EQ(write(20), ENOMEM);
  int polled = 0;
  ASSERT_TRUE(eventually([&] { return (polled += std::max(0, f.poll_cq(cq, 1, &wc))) == 4; }));
  EXPECT_EQ(wc.wr_id, 13u);
  EXPECT_EQ(write(20), 0);  // polling retired them
  ASSERT_TRUE(eventually([&] { return f.poll_cq(cq, 1, &wc) == 1 && wc.wr_id == 20; }));
  EXPECT_EQ(f.destroy_qp(a), 0);
  EXPECT_EQ(f.destroy_qp(b), 0);
  EXPECT_EQ(f.destroy_cq(cq), EBUSY);  // one event taken, none acknowledged
  f.ack_cq_events(cq, 1);
  EXPECT_EQ(f.dealloc_pd(pd), EBUSY);  // the MR still uses it
  EXPECT_EQ(f.dereg_mr(mr), 0);
  EXPECT_EQ(f.destroy_cq(cq), 0);
  EXPECT_EQ(f.destroy_comp_channel(ch), 0);
  EXPECT_EQ(f.dealloc_pd(pd), 0);
  EXPECT_EQ(f.close_device(ctx), 0);
}

}  // namespace
}  // namespace hmc
