// KV layouts: their checks and wire form, and blocks moved by id between two sessions over real UCX.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <future>
#include <numeric>
#include <random>
#include <vector>

#include "hmc/error.hpp"
#include "hmc/kv_layout.hpp"
#include "hmc/session.hpp"
#include "session_test_util.hpp"

using namespace std::chrono_literals;
using hmc::test::fill;
using hmc::test::holds;

namespace hmc {
namespace {

namespace asio = runtime::asio;

constexpr std::size_t kBlock = 4096;
constexpr std::size_t kBlocks = 64;

// K and V of two layers, as four regions; on the peer the same shape at other offsets, with K and V
// of layer 1 interleaved (stride two blocks), so that offsets differ on the two sides.
KvLayout local_layout() {
  std::vector<KvRegion> r;
  for (std::size_t i = 0; i < 4; ++i) r.push_back({i * kBlocks * kBlock, kBlock, kBlocks, 0});
  return KvLayout(r);
}
KvLayout remote_layout() {
  const std::size_t base = 1u << 20;
  return KvLayout({{base, kBlock, kBlocks, 0},
                   {base + kBlocks * kBlock, kBlock, kBlocks, 0},
                   {base + 2 * kBlocks * kBlock, kBlock, kBlocks, 2 * kBlock},
                   {base + 2 * kBlocks * kBlock + kBlock, kBlock, kBlocks, 2 * kBlock}});
}

std::size_t at(const KvLayout& l, std::size_t region, std::uint64_t id) {
  const KvRegion& g = l.regions()[region];
  return g.offset + id * g.stride;
}

TEST(KvLayout, RefusesRegionsThatCannotHoldTheirBlocks) {
  EXPECT_THROW(KvLayout({}), InvalidArgumentError);
  EXPECT_THROW(KvLayout({{0, 0, 4, 0}}), InvalidArgumentError);
  EXPECT_THROW(KvLayout({{0, 16, 0, 0}}), InvalidArgumentError);
  EXPECT_THROW(KvLayout({{0, 16, 4, 8}}), InvalidArgumentError);
  EXPECT_THROW(KvLayout({{~std::size_t{0} - 10, 16, 1, 0}}), InvalidArgumentError);
  EXPECT_THROW(KvLayout({{0, 16, std::size_t{1} << 62, 16}}), InvalidArgumentError);
  const KvLayout l({{100, 16, 4, 0}, {0, 8, 10, 32}});
  EXPECT_EQ(l.regions()[0].stride, 16u);  // stride 0 means block_bytes
  EXPECT_EQ(l.end(), std::max<std::size_t>(100 + 4 * 16, 9 * 32 + 8));
}

TEST(KvLayout, ItsWireFormRoundTripsAndHostileBytesAreRefused) {
  const KvLayout l = remote_layout();
  const std::vector<std::byte> b = l.to_bytes();
  EXPECT_TRUE(KvLayout::from_bytes(b) == l);
  EXPECT_THROW(KvLayout::from_bytes({}), InvalidArgumentError);
  EXPECT_THROW(KvLayout::from_bytes(std::span(b).first(b.size() - 1)), InvalidArgumentError);
  std::vector<std::byte> magic = b;
  magic[0] = std::byte{'X'};
  EXPECT_THROW(KvLayout::from_bytes(magic), InvalidArgumentError);
  std::vector<std::byte> count = b;
  count[8] = std::byte{0xff};  // claims 255 regions in the bytes of four
  EXPECT_THROW(KvLayout::from_bytes(count), InvalidArgumentError);
  std::vector<std::byte> stride = b;
  std::fill(stride.end() - 8, stride.end(), std::byte{0});
  stride[stride.size() - 8] = std::byte{1};  // a stride of one byte under blocks of 4 KiB
  EXPECT_THROW(KvLayout::from_bytes(stride), InvalidArgumentError);
}

TEST(KvLayout, IdsBecomeOneSegmentPerRegionAndBlockAndAnIdPastTheEndIsNamed) {
  const KvLayout l = local_layout(), r = remote_layout();
  const std::vector<std::uint64_t> src = {3, 0, 63}, dst = {7, 63, 1};
  const std::vector<Segment> s = l.segments_to(r, src, dst);
  ASSERT_EQ(s.size(), 12u);
  for (std::size_t region = 0; region < 4; ++region)
    for (std::size_t i = 0; i < 3; ++i) {
      const Segment& g = s[region * 3 + i];
      EXPECT_EQ(g.local_offset, at(l, region, src[i]));
      EXPECT_EQ(g.remote_offset, at(r, region, dst[i]));
      EXPECT_EQ(g.size, kBlock);
    }
  const std::vector<std::uint64_t> past = {1, 64};
  try {
    (void)l.segments_to(r, past, std::vector<std::uint64_t>{1, 2}, "src_ids", "dst_ids");
    ADD_FAILURE() << "id 64 of a 64-block layout was taken";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("src_ids[1] = 64"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)l.segments_to(r, std::vector<std::uint64_t>{1, 2}, past), InvalidArgumentError);
  EXPECT_THROW((void)l.segments_to(r, src, std::vector<std::uint64_t>{1}), InvalidArgumentError);
  EXPECT_THROW((void)l.segments_to(KvLayout({{0, kBlock, kBlocks, 0}}), src, dst), InvalidArgumentError);
  EXPECT_THROW((void)l.segments_to(KvLayout(std::vector<KvRegion>(4, {0, 2 * kBlock, kBlocks, 0})), src, dst),
               InvalidArgumentError);
}

class KvBlocks : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    dir_ = test::temp_dir();
    const auto o = test::session_options(GetParam(), runtime::ProgressMode::event, 2u << 20, dir_);
    test::connect_pair(o, o, dir_, 1, server, client);
  }
  void TearDown() override {
    client.reset();
    server.reset();
    std::filesystem::remove_all(dir_);
  }
  std::unique_ptr<Session> server, client;
  std::string dir_;
};

// A shuffled block table both ways: every block lands where its id says, in every region, and
// the blocks the table does not name stay as they were.
TEST_P(KvBlocks, PutAndGetMoveEachBlockToTheIdItIsPairedWith) {
  const KvLayout l = local_layout(), r = remote_layout();
  std::vector<std::uint64_t> src(kBlocks / 2), dst(kBlocks);
  std::iota(dst.begin(), dst.end(), 0);
  std::mt19937_64 rng(7);
  std::shuffle(dst.begin(), dst.end(), rng);
  dst.resize(src.size());
  std::iota(src.begin(), src.end(), 5);
  for (std::size_t region = 0; region < 4; ++region)
    for (std::uint64_t id = 0; id < kBlocks; ++id) {
      fill(client->buffer(), at(l, region, id), kBlock, 1000 * region + id);
      fill(server->buffer(), at(r, region, id), kBlock, 99999);
    }
  client->put_blocks(0, l, src, r, dst);
  std::size_t wrong = 0, touched = 0;
  for (std::size_t region = 0; region < 4; ++region) {
    for (std::size_t i = 0; i < src.size(); ++i)
      if (!holds(server->buffer(), at(r, region, dst[i]), kBlock, 1000 * region + src[i])) ++wrong;
    for (std::uint64_t id = 0; id < kBlocks; ++id)
      if (std::find(dst.begin(), dst.end(), id) == dst.end() &&
          !holds(server->buffer(), at(r, region, id), kBlock, 99999))
        ++touched;
  }
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(touched, 0u);
  // Back again with get_blocks, into other local blocks, as a future.
  std::vector<std::uint64_t> back(src.size());
  std::iota(back.begin(), back.end(), kBlocks - src.size());
  client->async_get_blocks(0, l, dst, r, back, asio::use_future).get();
  for (std::size_t region = 0; region < 4; ++region)
    for (std::size_t i = 0; i < src.size(); ++i)
      if (!holds(client->buffer(), at(l, region, back[i]), kBlock, 1000 * region + src[i])) ++wrong;
  EXPECT_EQ(wrong, 0u);
}

TEST_P(KvBlocks, TheNotifyOfABlockTransferNeverOvertakesItsBlocks) {
  const KvLayout l = local_layout(), r = remote_layout();
  std::vector<std::uint64_t> ids(kBlocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::vector<std::uint64_t> rev(ids.rbegin(), ids.rend());
  for (std::uint64_t round = 0; round < 20; ++round) {
    for (std::size_t region = 0; region < 4; ++region)
      for (std::uint64_t id = 0; id < kBlocks; ++id)
        fill(client->buffer(), at(l, region, id), kBlock, round * 7919 + id);
    if (round % 2 == 0) {
      client->put_blocks_notify(0, l, ids, r, rev, round);
    } else {
      client->async_put_blocks_notify(0, l, ids, r, rev, CtrlMessage::from_tag(round), asio::use_future).get();
    }
    ASSERT_EQ(server->ctrl_recv(1, 20s), round);
    std::size_t stale = 0;
    for (std::size_t region = 0; region < 4; ++region)
      for (std::uint64_t id = 0; id < kBlocks; ++id)
        if (!holds(server->buffer(), at(r, region, kBlocks - 1 - id), kBlock, round * 7919 + id)) ++stale;
    ASSERT_EQ(stale, 0u) << "round " << round;
  }
}

// A bad id is refused before anything is sent: the peer's blocks stay untouched.
TEST_P(KvBlocks, AnIdPastEitherLayoutSendsNothing) {
  const KvLayout l = local_layout(), r = remote_layout();
  fill(client->buffer(), 0, kBlock, 1);
  fill(server->buffer(), at(r, 0, 0), kBlock, 2);
  const std::vector<std::uint64_t> good = {0}, past = {kBlocks};
  EXPECT_THROW(client->put_blocks(0, l, good, r, past), InvalidArgumentError);
  EXPECT_THROW(client->put_blocks(0, l, past, r, good), InvalidArgumentError);
  EXPECT_THROW(client->put_blocks_notify(0, l, good, r, past, 5), InvalidArgumentError);
  EXPECT_THROW(client->get_blocks(0, l, past, r, good), InvalidArgumentError);
  EXPECT_TRUE(holds(server->buffer(), at(r, 0, 0), kBlock, 2));
  // A layout past the peer's buffer is the batch's own OutOfRangeError.
  const KvLayout beyond({{(2u << 20) - kBlock, kBlock, 2, 0}});
  EXPECT_THROW(client->put_blocks(0, KvLayout({{0, kBlock, 2, 0}}), good, beyond, std::vector<std::uint64_t>{1}),
               OutOfRangeError);
}

// A KV cache in registered user memory moves zero-copy: the layout's offsets are into that memory.
TEST_P(KvBlocks, BlocksOfRegisteredMemoryMoveBothWays) {
  const KvLayout l = local_layout(), r = remote_layout();
  std::vector<std::byte> cache(4 * kBlocks * kBlock);
  for (std::size_t region = 0; region < 4; ++region)
    for (std::uint64_t id = 0; id < kBlocks; ++id) {
      const auto p = test::pattern(kBlock, 77 * region + id);
      std::copy(p.begin(), p.end(), cache.begin() + static_cast<std::ptrdiff_t>(at(l, region, id)));
    }
  RegisteredMemory mem = client->register_memory(cache.data(), cache.size());
  const std::vector<std::uint64_t> src = {2, 50, 7}, dst = {63, 0, 31}, back = {10, 11, 12};
  client->async_put_blocks_from_notify(mem, 0, l, src, r, dst, CtrlMessage::from_tag(3), asio::use_future).get();
  server->wait_notify(1, 3, 1, 20s);
  for (std::size_t region = 0; region < 4; ++region)
    for (std::size_t i = 0; i < src.size(); ++i)
      EXPECT_TRUE(holds(server->buffer(), at(r, region, dst[i]), kBlock, 77 * region + src[i])) << region << " " << i;
  client->async_get_blocks_into(mem, 0, l, dst, r, back, asio::use_future).get();
  for (std::size_t region = 0; region < 4; ++region)
    for (std::size_t i = 0; i < src.size(); ++i)
      EXPECT_TRUE(std::equal(cache.begin() + static_cast<std::ptrdiff_t>(at(l, region, back[i])),
                             cache.begin() + static_cast<std::ptrdiff_t>(at(l, region, back[i]) + kBlock),
                             test::pattern(kBlock, 77 * region + src[i]).begin()))
          << region << " " << i;
  client->async_put_blocks_from(mem, 0, l, src, r, dst, asio::use_future).get();
  const KvLayout past({{0, kBlock, kBlocks, 0},
                       {0, kBlock, kBlocks, 0},
                       {0, kBlock, kBlocks, 0},
                       {4 * kBlocks * kBlock - kBlock, kBlock, 2, 0}});
  const std::vector<std::uint64_t> one = {1};
  EXPECT_THROW(client->async_put_blocks_from(mem, 0, past, one, r, one, asio::use_future).get(), OutOfRangeError);
}

// Receivers wait for their transfer's tag out of order, while other messages keep their order for
// ctrl_recv; every block is there when its wait completes.
TEST_P(KvBlocks, WaitNotifyTakesItsTagOutOfOrderAndLeavesTheRestToCtrlRecv) {
  const KvLayout l = local_layout(), r = remote_layout();
  constexpr std::uint64_t kRequests = 4;  // request k moves blocks [16k, 16k + 16) of every region
  for (std::size_t region = 0; region < 4; ++region)
    for (std::uint64_t id = 0; id < kBlocks; ++id) fill(client->buffer(), at(l, region, id), kBlock, 500 + id);
  for (std::uint64_t k = 0; k < kRequests; ++k) {
    std::vector<std::uint64_t> ids(16);
    std::iota(ids.begin(), ids.end(), 16 * k);
    client->ctrl_send(0, 9000 + k);  // plain messages between the notifies
    client->put_blocks_notify(0, l, ids, r, ids, 100 + k);
  }
  for (std::uint64_t k = kRequests; k-- > 0;) {  // newest first
    server->wait_notify(1, 100 + k, 1, 20s);
    for (std::size_t region = 0; region < 4; ++region)
      for (std::uint64_t id = 16 * k; id < 16 * k + 16; ++id)
        ASSERT_TRUE(holds(server->buffer(), at(r, region, id), kBlock, 500 + id)) << k << " " << region << " " << id;
  }
  for (std::uint64_t k = 0; k < kRequests; ++k) EXPECT_EQ(server->ctrl_recv(1, 20s), 9000 + k);
}

// A counter: one wait for N tags completes once all N arrived, some of them before it began.
TEST_P(KvBlocks, WaitNotifyCountsTagsThatArrivedBeforeAndAfterItBegan) {
  const KvLayout l = local_layout(), r = remote_layout();
  std::vector<std::uint64_t> ids(kBlocks);
  std::iota(ids.begin(), ids.end(), 0);
  for (int i = 0; i < 3; ++i) client->put_blocks_notify(0, l, ids, r, ids, 7);
  auto waited = server->async_wait_notify(1, 7, 8, 20s, asio::use_future);
  EXPECT_EQ(waited.wait_for(200ms), std::future_status::timeout) << "3 of 8 tags completed it";
  for (int i = 0; i < 5; ++i) client->put_blocks_notify(0, l, ids, r, ids, 7);
  EXPECT_EQ(waited.wait_for(20s), std::future_status::ready);
  waited.get();
  // A wait that timed out keeps what it counted for the next wait on its tag.
  client->ctrl_send(0, 11);
  EXPECT_THROW(server->wait_notify(1, 11, 2, 100ms), TimeoutError);
  server->wait_notify(1, 11, 1, 20s);
  EXPECT_THROW(server->wait_notify(1, 11, 0, 20s), InvalidArgumentError);
  client->ctrl_send(0, 12);
  EXPECT_EQ(server->ctrl_recv(1, 20s), 12u) << "a counted tag reached ctrl_recv";
}

// Many waits outstanding at once, completed in whatever order their tags come; one past the
// bound is refused, and a lost peer fails the rest.
TEST_P(KvBlocks, ManyWaitsAreOutstandingBoundedAndFailWhenThePeerIsLost) {
  constexpr std::uint64_t kWaits = 200;
  std::vector<std::future<void>> waits;
  for (std::uint64_t t = 0; t < kWaits; ++t) waits.push_back(server->async_wait_notify(1, t, 1, 20s, asio::use_future));
  std::vector<std::uint64_t> order(kWaits);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(11);
  std::shuffle(order.begin(), order.end(), rng);
  for (std::uint64_t t : order) client->ctrl_send(0, t);
  for (auto& w : waits) EXPECT_NO_THROW(w.get());
  waits.clear();
  for (std::size_t i = 0; i < 4096; ++i) waits.push_back(server->async_wait_notify(1, 77, 1, 20s, asio::use_future));
  EXPECT_THROW(server->wait_notify(1, 78, 1, 20s), InvalidArgumentError);
  client.reset();  // the peer goes away
  for (auto& w : waits) EXPECT_THROW(w.get(), PeerLostError);
}

INSTANTIATE_TEST_SUITE_P(Transports, KvBlocks, ::testing::Values("shm", "tcp"),
                         [](const ::testing::TestParamInfo<const char*>& p) { return std::string(p.param); });

}  // namespace
}  // namespace hmc
