// Session over real UCX, parametrized over transports (tcp, shared memory) and progress modes.
#include <gtest/gtest.h>

#include <array>
#include <limits>

#include <atomic>
#include <deque>
#include <string_view>
#include <thread>

#include "hmc/runtime/log.hpp"
#include "session_test_util.hpp"

namespace hmc {
namespace {

using namespace std::chrono_literals;
namespace asio = runtime::asio;
using test::fill;
using test::holds;

constexpr std::size_t kBuffer = (64u << 20) + (1u << 20);
constexpr std::uint16_t kServerDataPort = 18515;

struct Param {
  const char* tls;
  runtime::ProgressMode mode;
};

class SessionTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    dir = test::temp_dir();
    server = make_session();
    server->init_server("127.0.0.1", kServerDataPort, 0, 0, 0, dir);
    client = connect_client(1);
    server->wait_peer(1, 10s);
  }
  void TearDown() override {
    extra.clear();
    client.reset();
    server.reset();
    std::filesystem::remove_all(dir);
  }
  std::unique_ptr<Session> make_session(std::size_t buffer = kBuffer) {
    return std::make_unique<Session>(test::session_options(GetParam().tls, GetParam().mode, buffer, dir));
  }
  std::unique_ptr<Session> connect_client(std::uint32_t rank) {
    auto c = make_session();
    EXPECT_EQ(c->connect(0, rank, "127.0.0.1", kServerDataPort, server->ctrl_port()), 0u);
    return c;
  }

  std::string dir;
  std::unique_ptr<Session> server, client;
  std::vector<std::unique_ptr<Session>> extra;
};

TEST_P(SessionTest, UsesTheRequestedUcxTransport) {
  const std::string t = client->transports(0);
  if (std::string(GetParam().tls) == "tcp") {
    EXPECT_NE(t.find("tcp"), std::string::npos) << t;
  } else {
    EXPECT_TRUE(t.find("posix") != std::string::npos || t.find("sysv") != std::string::npos ||
                t.find("cma") != std::string::npos)
        << "same-host peers must get shared memory, got: " << t;
  }
  EXPECT_EQ(server->peers(), std::vector<std::uint32_t>{1});
  EXPECT_EQ(client->resolve_peer("127.0.0.1", kServerDataPort), 0u);
  EXPECT_THROW(client->resolve_peer("127.0.0.1", std::uint16_t{1}), NotConnectedError);
}

TEST_P(SessionTest, PutAndGetFromOneByteTo64MiBArriveIntact) {
  const std::size_t sizes[] = {1, 7, 4096, 65539, 1u << 20, (8u << 20) + 5, 64u << 20};
  std::uint64_t seed = 1;
  for (std::size_t n : sizes) {
    SCOPED_TRACE(n);
    const std::size_t local = 3, remote = 1001;  // unaligned on purpose
    fill(client->buffer(), local, n, ++seed);
    client->put(0, local, remote, n);
    EXPECT_TRUE(holds(server->buffer(), remote, n, seed)) << "put of " << n << " bytes";
    fill(server->buffer(), 17, n, ++seed);
    client->get(0, local, 17, n);
    EXPECT_TRUE(holds(client->buffer(), local, n, seed)) << "get of " << n << " bytes";
  }
}

TEST_P(SessionTest, EitherSideCanPutAndGet) {
  fill(server->buffer(), 0, 4096, 5);
  server->put(1, 0, 8192, 4096);
  EXPECT_TRUE(holds(client->buffer(), 8192, 4096, 5));
  fill(client->buffer(), 100, 333, 6);
  server->get(1, 200, 100, 333);
  EXPECT_TRUE(holds(server->buffer(), 200, 333, 6));
}

TEST_P(SessionTest, TenThousandPutNbInFlightAllComplete) {
  constexpr std::size_t kOps = 10'000, kSize = 4096;
  fill(client->buffer(), 0, kOps * kSize, 77);
  std::vector<std::future<void>> ops;
  ops.reserve(kOps);
  for (std::size_t i = 0; i < kOps; ++i) ops.push_back(client->put_nb(0, i * kSize, i * kSize, kSize));
  Session::wait(ops, 60s);
  EXPECT_TRUE(holds(server->buffer(), 0, kOps * kSize, 77));
}

// Completions are batched per loop turn and puts share flushes, yet each put still
// completes only once its bytes are at the peer: 64 coroutine lanes keep 64 puts in flight (8 B
// and 4 KiB), each with a fresh pattern, and check the peer's bytes when their completion arrives.
TEST_P(SessionTest, EachOfManyPutsInFlightIsAtThePeerWhenItCompletes) {
  constexpr std::size_t kLanes = 64, kRounds = 40, kSlot = 4096;
  std::atomic<int> stale{0}, completed{0};
  auto lane = [&](std::size_t l) -> asio::awaitable<void> {
    for (std::size_t i = 0; i < kRounds; ++i) {
      const std::size_t size = (l + i) % 4 == 0 ? kSlot : 8;
      const std::uint64_t seed = 1 + l * kRounds + i;
      fill(client->buffer(), l * kSlot, size, seed);
      co_await client->async_put(0, l * kSlot, l * kSlot, size, asio::use_awaitable);
      if (!holds(server->buffer(), l * kSlot, size, seed)) ++stale;
      ++completed;
    }
  };
  std::vector<std::future<void>> lanes;
  for (std::size_t l = 0; l < kLanes; ++l)
    lanes.push_back(asio::co_spawn(client->executor(), lane(l), asio::use_future));
  for (auto& f : lanes) ASSERT_EQ(f.wait_for(60s), std::future_status::ready);
  for (auto& f : lanes) f.get();
  EXPECT_EQ(completed.load(), static_cast<int>(kLanes * kRounds));
  EXPECT_EQ(stale.load(), 0) << "a put completed before its bytes were at the peer";
}

TEST_P(SessionTest, TagAfterPutNeverShowsStaleBytes) {
  constexpr int kRounds = 1000;
  constexpr std::size_t kSize = 64u << 10;
  std::atomic<int> stale{0}, seen{0};
  std::thread reader([&] {
    for (int i = 0; i < kRounds; ++i) {
      const std::uint64_t tag = server->ctrl_recv(1, 20s);
      if (!holds(server->buffer(), 0, kSize, tag)) ++stale;
      ++seen;
      server->ctrl_send(1, tag);  // lets the writer reuse the region
    }
  });
  for (int i = 0; i < kRounds; ++i) {
    fill(client->buffer(), 0, kSize, 1000 + i);
    client->put(0, 0, 0, kSize);
    client->ctrl_send(0, 1000 + i);
    ASSERT_EQ(client->ctrl_recv(0, 20s), 1000u + i);
  }
  reader.join();
  EXPECT_EQ(seen.load(), kRounds);
  EXPECT_EQ(stale.load(), 0) << "a tag overtook its put";
}

// put_notify's tag reaches ctrl_recv only after every byte of its put, with several
// put_notify in flight, plain ctrl_send tags between them (same order as sent) and sizes from 8 B
// to 1 MiB. The receiver checks every byte behind every tag before it lets the region be reused.
TEST_P(SessionTest, PutNotifyTagNeverArrivesBeforeItsBytes) {
  const bool tcp = std::string(GetParam().tls) == "tcp";
  const int rounds = tcp ? 1000 : 2000;
  constexpr std::size_t kRegions = 16, kStride = 2u << 20;
  constexpr std::uint64_t kMarker = 1ull << 63;  // a plain ctrl_send after some put_notify
  auto size_of = [](int i) -> std::size_t {
    if (i % 50 == 49) return (1u << 20) + 5;
    const std::size_t sizes[] = {8, 64, 1000, 4096, (64u << 10) + 3};
    return sizes[i % 5];
  };
  std::atomic<int> stale{0}, disorder{0};
  std::thread receiver([&] {
    for (int i = 0; i < rounds; ++i) {
      const std::uint64_t tag = server->ctrl_recv(1, 20s);
      if (tag != static_cast<std::uint64_t>(i)) ++disorder;
      const std::size_t at = (static_cast<std::size_t>(i) % kRegions) * kStride;
      if (!holds(server->buffer(), at, size_of(i), 5000 + static_cast<std::uint64_t>(i))) ++stale;
      if (i % 3 == 0 && server->ctrl_recv(1, 20s) != (kMarker | static_cast<std::uint64_t>(i))) ++disorder;
      server->ctrl_send(1, static_cast<std::uint64_t>(i));  // region i % kRegions may be written again
    }
  });
  std::deque<std::future<void>> inflight;
  for (int i = 0; i < rounds; ++i) {
    if (i >= static_cast<int>(kRegions)) {
      if (client->ctrl_recv(0, 20s) != static_cast<std::uint64_t>(i) - kRegions) ++disorder;
      inflight.front().get();
      inflight.pop_front();
    }
    const std::size_t at = (static_cast<std::size_t>(i) % kRegions) * kStride;
    fill(client->buffer(), at, size_of(i), 5000 + static_cast<std::uint64_t>(i));
    inflight.push_back(client->async_put_notify(
        0, at, at, size_of(i), CtrlMessage::from_tag(static_cast<std::uint64_t>(i)), asio::use_future));
    if (i % 3 == 0)
      client->async_ctrl_send(0, CtrlMessage::from_tag(kMarker | static_cast<std::uint64_t>(i)), asio::use_future);
  }
  receiver.join();
  for (auto& f : inflight) f.get();
  for (std::size_t i = 0; i < kRegions; ++i) client->ctrl_recv(0, 20s);  // the last acks
  EXPECT_EQ(disorder.load(), 0) << "a tag arrived out of order";
  EXPECT_EQ(stale.load(), 0) << "a put_notify tag overtook its bytes";
  // The blocking form, and a peer without a data connection is a typed error.
  fill(client->buffer(), 0, 4096, 9);
  client->put_notify(0, 0, 0, 4096, 77);
  EXPECT_EQ(server->ctrl_recv(1, 20s), 77u);
  EXPECT_TRUE(holds(server->buffer(), 0, 4096, 9));
  EXPECT_THROW(client->put_notify(0, 0, kBuffer, 1, 1), OutOfRangeError);
  client->disconnect(0);
  EXPECT_THROW(client->put_notify(0, 0, 0, 8, 1), NotConnectedError);
}

// A batch of scattered blocks with a notify: the tag reaches ctrl_recv only after every block is
// there, round after round with the regions reused, and tags keep their order.
TEST_P(SessionTest, ABatchWithANotifyIsWholeWhenItsTagArrives) {
  constexpr std::size_t kBlock = 4096, kBlocks = 48;
  constexpr int kRounds = 60;
  std::atomic<int> stale{0}, disorder{0};
  std::thread receiver([&] {
    for (int i = 0; i < kRounds; ++i) {
      const std::uint64_t tag = server->ctrl_recv(1, 20s);
      if (tag != static_cast<std::uint64_t>(i)) ++disorder;
      const std::size_t region = (1u << 20) * static_cast<std::size_t>(i % 2);
      for (std::size_t b = 0; b < kBlocks; ++b)
        if (!holds(server->buffer(), region + ((b * 7) % kBlocks) * kBlock, kBlock, 100 * tag + b)) ++stale;
      server->ctrl_send(1, tag);
    }
  });
  for (int i = 0; i < kRounds; ++i) {
    if (i >= 2) client->ctrl_recv(0, 20s);  // the receiver is done with this round's region
    const std::size_t region = (1u << 20) * static_cast<std::size_t>(i % 2);
    std::vector<Segment> segs;
    for (std::size_t b = 0; b < kBlocks; ++b) {
      fill(client->buffer(), region + b * kBlock, kBlock, 100 * static_cast<std::uint64_t>(i) + b);
      segs.push_back({region + b * kBlock, region + ((b * 7) % kBlocks) * kBlock, kBlock});
    }
    if (i % 2 == 0) {
      client->put_batch_notify(0, std::move(segs), static_cast<std::uint64_t>(i));
    } else {
      client
          ->async_put_batch_notify(0, std::move(segs), CtrlMessage::from_tag(static_cast<std::uint64_t>(i)),
                                   asio::use_future)
          .get();
    }
  }
  receiver.join();
  for (int i = 0; i < 2; ++i) client->ctrl_recv(0, 20s);
  EXPECT_EQ(disorder.load(), 0);
  EXPECT_EQ(stale.load(), 0) << "a batch's tag overtook some of its bytes";
  EXPECT_THROW(client->put_batch_notify(0, {{0, 0, 8}, {0, kBuffer, 1}}, 1), OutOfRangeError);
  EXPECT_THROW(client->put_batch_notify(0, {}, 1), InvalidArgumentError);
}

TEST_P(SessionTest, BatchAndPipelineWithSizesThatAreNotChunkMultiples) {
  std::vector<Segment> segs;
  std::size_t off = 0;
  for (std::size_t i = 0; i < 50; ++i) {
    const std::size_t n = 1 + i * 997;
    segs.push_back({off, 2 * off + 5, n});
    fill(client->buffer(), off, n, 300 + i);
    off += n;
  }
  client->put_batch(0, segs);
  for (std::size_t i = 0; i < segs.size(); ++i)
    EXPECT_TRUE(holds(server->buffer(), segs[i].remote_offset, segs[i].size, 300 + i));

  const std::size_t n = (10u << 20) + 123, chunk = 1u << 20;
  fill(client->buffer(), 11, n, 900);
  client->put_pipeline(0, 11, 29, n, chunk, 4);
  EXPECT_TRUE(holds(server->buffer(), 29, n, 900));
  fill(server->buffer(), 1u << 20, n, 901);
  client->get_pipeline(0, 7, 1u << 20, n, chunk, 3);
  EXPECT_TRUE(holds(client->buffer(), 7, n, 901));

  for (auto& s : segs) s.remote_offset += 1;
  for (std::size_t i = 0; i < segs.size(); ++i) fill(server->buffer(), segs[i].remote_offset, segs[i].size, 500 + i);
  client->get_batch(0, segs);
  for (std::size_t i = 0; i < segs.size(); ++i)
    EXPECT_TRUE(holds(client->buffer(), segs[i].local_offset, segs[i].size, 500 + i));
}

TEST_P(SessionTest, CoroutinesOnTheCallersOwnExecutorResumeThere) {
  asio::io_context user;
  std::thread::id resumed_on;
  fill(client->buffer(), 0, 1000, 42);
  asio::co_spawn(
      user,
      [&]() -> asio::awaitable<void> {
        co_await client->async_put(0, 0, 0, 1000, asio::use_awaitable);
        resumed_on = std::this_thread::get_id();
        co_await client->async_ctrl_send(0, CtrlMessage::from_tag(9), asio::use_awaitable);
      },
      asio::detached);
  user.run();
  client->peers();  // a loop round trip: the loop thread has left `user` (it signals after unlocking)
  EXPECT_EQ(resumed_on, std::this_thread::get_id());
  EXPECT_EQ(server->ctrl_recv(1, 5s), 9u);
  EXPECT_TRUE(holds(server->buffer(), 0, 1000, 42));
}

TEST_P(SessionTest, WithoutATokenEveryAsyncOpIsAnAwaitable) {
  asio::io_context user;
  std::vector<std::byte> mine(4096);
  RegisteredMemory reg = client->register_memory(mine.data(), mine.size());
  fill(client->buffer(), 0, 4096, 77);
  bool finished = false;
  asio::co_spawn(
      user,
      [&]() -> asio::awaitable<void> {
        co_await client->async_put(0, 0, 0, 4096);
        co_await client->async_get(0, 4096, 0, 4096);
        // (GCC 12 miscompiles an initializer list inside a co_await expression: build vectors first.)
        std::vector<Segment> out{Segment{0, 8192, 100}}, in{Segment{8192, 8192, 100}};
        co_await client->async_put_batch(0, std::move(out));
        co_await client->async_get_batch(0, std::move(in));
        co_await client->async_put_pipeline(0, 0, 16384, 4096, 1024, 2);
        co_await client->async_get_pipeline(0, 16384, 16384, 4096, 1024, 2);
        co_await client->async_get_into(reg, 0, 0, 0, 4096);
        co_await client->async_put_from(reg, 0, 0, 32768, 4096);
        co_await client->async_ctrl_send(0, CtrlMessage::from_tag(5));
        finished = (co_await client->async_ctrl_recv(0, 10s)).tag() == 6;
      },
      asio::detached);
  std::thread runner([&] { user.run(); });
  EXPECT_EQ(server->ctrl_recv(1, 10s), 5u);
  server->ctrl_send(1, 6);
  runner.join();
  EXPECT_TRUE(finished);
  EXPECT_TRUE(holds(client->buffer(), 4096, 4096, 77));
  EXPECT_TRUE(holds(server->buffer(), 32768, 4096, 77));
}

TEST_P(SessionTest, CallbackCompletionStyle) {
  std::promise<std::exception_ptr> done;
  client->async_get(0, 0, 0, 64, [&](std::exception_ptr e) { done.set_value(e); });
  auto f = done.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(f.get(), nullptr);
}

TEST_P(SessionTest, BadInputIsATypedErrorBeforeAnythingIsSent) {
  fill(server->buffer(), 0, 4096, 1);
  const std::size_t end = kBuffer;
  EXPECT_THROW(client->put(0, end - 10, 0, 11), OutOfRangeError);  // local range past the end
  EXPECT_THROW(client->put(0, 0, end, 1), OutOfRangeError);        // remote offset at the end
  EXPECT_THROW(client->put(0, 0, 8, SIZE_MAX), OutOfRangeError);   // offset + size overflows
  EXPECT_THROW(client->get(0, SIZE_MAX, 0, 2), OutOfRangeError);
  EXPECT_THROW(client->put(0, 0, 0, 0), InvalidArgumentError);  // zero size
  EXPECT_THROW(client->put(7, 0, 0, 1), NotConnectedError);     // unknown peer
  EXPECT_THROW(client->put_batch(0, {}), InvalidArgumentError);
  EXPECT_THROW(client->put_batch(0, {{0, 0, 1}, {0, end, 1}}), OutOfRangeError);
  EXPECT_THROW(client->put_pipeline(0, 0, 0, 100, 0, 4), InvalidArgumentError);
  EXPECT_THROW(client->get_pipeline(0, 0, 0, 100, 10, 0), InvalidArgumentError);
  EXPECT_TRUE(holds(server->buffer(), 0, 4096, 1)) << "a rejected put must not have written anything";
  auto f = client->put_nb(0, 0, end, 1);
  EXPECT_THROW(Session::wait(f, 5s), OutOfRangeError);
  EXPECT_THROW(Session::wait(f, 5s), InvalidArgumentError);  // already waited for
  client->close();
  EXPECT_THROW(client->put(0, 0, 0, 1), ClosedError);
  EXPECT_THROW(client->ctrl_send(0, 1), ClosedError);
}

TEST_P(SessionTest, RegisteredUserMemoryIsASourceAndDestinationWithoutStaging) {
  auto src = test::pattern(3u << 20, 61);
  std::vector<std::byte> dst(3u << 20);
  {
    RegisteredMemory rs = client->register_memory(src.data(), src.size());
    RegisteredMemory rd = client->register_memory(dst.data(), dst.size());
    client->async_put_from(rs, 0, 0, 4096, src.size(), asio::use_future).get();
    EXPECT_TRUE(holds(server->buffer(), 4096, src.size(), 61));
    client->async_get_into(rd, 5, 0, 4096, src.size() - 5, asio::use_future).get();
    EXPECT_TRUE(std::equal(src.begin(), src.end() - 5, dst.begin() + 5));
    EXPECT_THROW(client->async_put_from(rs, 1, 0, 0, src.size(), asio::use_future).get(), OutOfRangeError);
    // Unregistering while a put is in flight is safe: the region lives until the put is done.
    auto inflight = client->async_put_from(rs, 0, 0, 0, src.size(), asio::use_future);
    RegisteredMemory gone = std::move(rs);
    { RegisteredMemory drop = std::move(gone); }
    inflight.get();
    EXPECT_TRUE(holds(server->buffer(), 0, src.size(), 61));
    EXPECT_THROW(client->async_put_from(rs, 0, 0, 0, 1, asio::use_future).get(), InvalidArgumentError);
  }
  EXPECT_THROW(client->register_memory(nullptr, 10), InvalidArgumentError);
  EXPECT_EQ(server->resolve_peer("127.0.0.1", std::nullopt), 1u);
}

TEST_P(SessionTest, FourClientsOnOneServerAtOnce) {
  constexpr std::uint32_t kClients = 4;
  constexpr std::size_t kSize = 1u << 20;
  for (std::uint32_t r = 2; r < 2 + kClients; ++r) extra.push_back(nullptr);
  std::vector<std::thread> threads;
  for (std::uint32_t i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      const std::uint32_t rank = 2 + i;
      extra[i] = connect_client(rank);
      fill(extra[i]->buffer(), 0, kSize, rank);
      extra[i]->put(0, 0, rank * kSize, kSize);
      extra[i]->ctrl_send(0, rank);
    });
  }
  for (auto& t : threads) t.join();
  for (std::uint32_t r = 2; r < 2 + kClients; ++r) {
    EXPECT_EQ(server->ctrl_recv(r, 10s), r);
    EXPECT_TRUE(holds(server->buffer(), r * kSize, kSize, r));
  }
  EXPECT_EQ(server->peers().size(), kClients + 1);
}

TEST_P(SessionTest, DisconnectedPeerFailsItsOperations) {
  client->disconnect(0);
  try {
    client->put(0, 0, 0, 8);
    ADD_FAILURE() << "a put to a disconnected peer succeeded";
  } catch (const PeerLostError& e) {  // it was connected: lost, saying how, not "never connected"
    EXPECT_NE(std::string(e.what()).find("rank 0 was lost: disconnect() dropped it"), std::string::npos) << e.what();
  }
  EXPECT_THROW(client->ctrl_recv(0, 2s), PeerLostError);
}

INSTANTIATE_TEST_SUITE_P(
    TransportsAndModes, SessionTest,
    ::testing::Values(Param{"tcp", runtime::ProgressMode::event}, Param{"tcp", runtime::ProgressMode::poll},
                      Param{"shm", runtime::ProgressMode::event}, Param{"shm", runtime::ProgressMode::poll}),
    [](const auto& p) { return std::string(p.param.tls) + "_" + std::string(runtime::to_string(p.param.mode)); });

TEST(SessionFastCtrl, TagsSentAcrossTheSwitchToUcxArriveInOrder) {
  const std::string dir = test::temp_dir();
  Session server(test::session_options("shm", runtime::ProgressMode::event, 1u << 20, dir));
  server.init_server("127.0.0.1", 1, 0, 0, 0, dir);
  constexpr std::uint64_t kTags = 3000;
  // The server sends from the moment the control connection exists: the first tags go over the
  // socket, the rest over UCX once its endpoint is up. The client must see them all in order.
  std::thread sender([&] {
    std::uint64_t next = 0;
    const auto until = std::chrono::steady_clock::now() + 20s;
    while (next < kTags && std::chrono::steady_clock::now() < until) {
      try {
        server.ctrl_send(1, next);
        ++next;
      } catch (const NotConnectedError&) {
        std::this_thread::yield();  // the client is not connected yet
      }
    }
  });
  Session client(test::session_options("shm", runtime::ProgressMode::event, 1u << 20, dir));
  client.connect(0, 1, "127.0.0.1", 1, server.ctrl_port());
  std::uint64_t out_of_order = 0;
  for (std::uint64_t i = 0; i < kTags; ++i)
    if (client.ctrl_recv(0, 20s) != i) ++out_of_order;
  sender.join();
  EXPECT_EQ(out_of_order, 0u);
  std::filesystem::remove_all(dir);
}

// Without the fast path (fast_ctrl off) put_notify is the put, then the tag on the control socket.
TEST(SessionFastCtrl, PutNotifyWithoutTheFastPathKeepsItsOrder) {
  const std::string dir = test::temp_dir();
  auto o = test::session_options("tcp", runtime::ProgressMode::event, 1u << 20, dir);
  o.fast_ctrl = false;
  Session server(o);
  server.init_server("127.0.0.1", 1, 0, 0, 0, dir);
  Session client(o);
  client.connect(0, 1, "127.0.0.1", 1, server.ctrl_port());
  for (std::uint64_t i = 0; i < 200; ++i) {
    fill(client.buffer(), 0, 65536, 300 + i);
    client.put_notify(0, 0, 0, 65536, i);
    ASSERT_EQ(server.ctrl_recv(1, 20s), i);
    ASSERT_TRUE(holds(server.buffer(), 0, 65536, 300 + i)) << "round " << i;
  }
  std::filesystem::remove_all(dir);
}

TEST(Segments, RunsThatContinueOnBothSidesBecomeOneAndNothingElseMoves) {
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  std::vector<Segment> v = {{0, 100, 10},     {10, 110, 5}, {15, 115, 1},  // one run
                            {16, 200, 4},                                  // local continues, remote does not
                            {20, 204, 0},     {20, 204, 4},                // empty: kept apart
                            {kMax - 1, 0, 1}, {kMax, 1, 1},                // would wrap: kept apart
                            {50, 60, 8},      {58, 68, 8}};                // a second run
  coalesce(v);
  const std::vector<std::array<std::size_t, 3>> want = {{0, 100, 16},     {16, 200, 4}, {20, 204, 0}, {20, 204, 4},
                                                        {kMax - 1, 0, 1}, {kMax, 1, 1}, {50, 60, 16}};
  ASSERT_EQ(v.size(), want.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(v[i].local_offset, want[i][0]) << i;
    EXPECT_EQ(v[i].remote_offset, want[i][1]) << i;
    EXPECT_EQ(v[i].size, want[i][2]) << i;
  }
  std::vector<Segment> one = {{1, 2, 3}};
  coalesce(one);
  EXPECT_EQ(one.size(), 1u);
}

TEST(SessionLarge, BuffersOfFourGiBAndMoreUse64BitOffsets) {
  const std::string dir = test::temp_dir();
  const std::size_t big = (5ull << 30);
  Session server(test::session_options("", runtime::ProgressMode::event, big, dir));
  server.init_server("127.0.0.1", 1, 0, 0, 0, dir);
  Session client(test::session_options("", runtime::ProgressMode::event, big, dir));
  client.connect(0, 1, "127.0.0.1", 1, server.ctrl_port());
  const std::size_t at = (4ull << 30) + (512ull << 20);
  fill(client.buffer(), at, 1u << 20, 4);
  client.put(0, at, at + 3, 1u << 20);
  EXPECT_TRUE(holds(server.buffer(), at + 3, 1u << 20, 4));
  client.get(0, 0, at + 3, 1u << 20);
  EXPECT_TRUE(holds(client.buffer(), 0, 1u << 20, 4));
  std::filesystem::remove_all(dir);
}

TEST(SessionConfig, AServerGivenBothPortsDefaultsToUcxAndOpensNoRdmaDeviceUntilAClientAsks) {
  const std::string dir = test::temp_dir();
  Session s(test::session_options("", runtime::ProgressMode::event, 4096, dir));
  // The reference README's form: both ports. Nothing about RDMA happens (or is logged) until an
  // RDMA client connects (tests/verbs: MixedSession, MixedConfig).
  std::vector<std::string> lines;
  const auto level = runtime::log_level();
  runtime::set_log_level(runtime::LogLevel::debug);
  runtime::set_log_hook([&](runtime::LogLevel, std::string_view m) {
    if (m.find("RDMA") != std::string_view::npos || m.find("verbs") != std::string_view::npos) lines.emplace_back(m);
  });
  s.init_server("127.0.0.1", 1, 2026, 0, 0, dir);
  runtime::set_log_hook({});
  runtime::set_log_level(level);
  EXPECT_TRUE(lines.empty()) << lines.front();
  EXPECT_EQ(s.conn_type(), ConnType::UCX);
  EXPECT_THROW(s.put(0, 0, 0, 1), NotConnectedError);
  EXPECT_THROW(s.ctrl_send(0, 1), NotConnectedError);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hmc
