// Sessions whose peers die, time out or share a host: every operation reaches one terminal state,
// nothing is posted after it, the loop goes idle again and addresses never reach the wrong peer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hmc/runtime/log.hpp"
#include "session_test_util.hpp"

namespace hmc {
namespace {

using namespace std::chrono_literals;
namespace asio = runtime::asio;
using test::fill;
using test::holds;

constexpr std::uint16_t kDataPort = 18600;

struct Fixture {
  std::string dir = test::temp_dir();
  ~Fixture() { std::filesystem::remove_all(dir); }
  std::unique_ptr<Session> server(const char* tls, std::size_t buffer, std::chrono::milliseconds timeout = 20s) {
    auto o = test::session_options(tls, runtime::ProgressMode::event, buffer, dir);
    o.timeout = timeout;
    auto s = std::make_unique<Session>(o);
    s->init_server("127.0.0.1", kDataPort, 0, 0, 0, dir);
    return s;
  }
  std::unique_ptr<Session> client(Session& server, std::uint32_t rank, const char* tls, std::size_t buffer,
                                  std::chrono::milliseconds timeout = 20s) {
    auto o = test::session_options(tls, runtime::ProgressMode::event, buffer, dir);
    o.timeout = timeout;
    auto c = std::make_unique<Session>(o);
    c->connect(0, rank, "127.0.0.1", kDataPort, server.ctrl_port());
    server.wait_peer(rank, 10s);
    return c;
  }
};

// Chunks of a pipeline that complete after their peer was removed must not post the next chunk to
// that peer (a lookup of the removed rank would throw from the poller and end the process).
TEST(SessionFailure, PeerDestroyedMidPipelineFailsTheOperationAndNothingElse) {
  Fixture f;
  constexpr std::size_t kSize = 64u << 20;
  for (int round = 0; round < 6; ++round) {
    SCOPED_TRACE(round);
    auto server = f.server("tcp", kSize);
    auto client = f.client(*server, 1, "tcp", kSize);
    auto op = client->async_get_pipeline(0, 0, 0, kSize, 64u << 10, 4, asio::use_future);
    std::this_thread::sleep_for(std::chrono::milliseconds(1 + round));
    server.reset();
    try {
      op.get();  // it may have finished before the server went
    } catch (const Error& e) {
      EXPECT_TRUE(e.status() == Status::PEER_LOST || e.status() == Status::CLOSED) << e.what();
    }
    EXPECT_THROW(client->get(0, 0, 0, 8), NotConnectedError);
  }
}

// put_notify reaches one terminal state like a put: peer lost mid-flight (tcp and shm)
// gives PeerLostError (or ClosedError, NotConnectedError once the loss is known), and nothing hangs.
TEST(SessionFailure, PutNotifyInFlightWhenThePeerGoesFailsTyped) {
  Fixture f;
  constexpr std::size_t kSize = 16u << 20;
  for (const char* tls : {"tcp", "shm"}) {
    SCOPED_TRACE(tls);
    auto server = f.server(tls, kSize);
    auto client = f.client(*server, 1, tls, kSize);
    std::vector<std::future<void>> ops;
    for (int i = 0; i < 64; ++i)
      ops.push_back(client->async_put_notify(0, 0, 0, (1u << 20) + static_cast<std::size_t>(i),
                                             CtrlMessage::from_tag(1), asio::use_future));
    server.reset();
    int ok = 0, lost = 0;
    for (auto& op : ops) {
      try {
        op.get();
        ++ok;
      } catch (const Error& e) {
        EXPECT_TRUE(e.status() == Status::PEER_LOST || e.status() == Status::CLOSED) << e.what();
        ++lost;
      }
    }
    std::printf("%s: %d put_notify done before the peer went, %d failed typed\n", tls, ok, lost);
    EXPECT_THROW(client->put_notify(0, 0, 0, 8, 1), NotConnectedError);
  }
}

// A peer that stops progressing (its loop blocked): a put_notify over tcp waits for the flush and
// ends with TimeoutError at the session's deadline. Its message was posted: once the peer runs
// again it arrives, still after every byte of the put, and the session works on.
TEST(SessionFailure, PutNotifyPastItsDeadlineIsATimeoutError) {
  Fixture f;
  constexpr std::size_t kSize = 32u << 20;
  auto server = f.server("tcp", kSize);
  auto client = f.client(*server, 1, "tcp", kSize, 500ms);
  fill(client->buffer(), 0, kSize, 5);
  std::promise<void> release;
  asio::post(server->executor(), [held = release.get_future().share()] { held.wait_for(3s); });
  EXPECT_THROW(client->put_notify(0, 0, 0, kSize, 5), TimeoutError);
  release.set_value();
  EXPECT_EQ(server->ctrl_recv(1, 20s), 5u);
  EXPECT_TRUE(holds(server->buffer(), 0, kSize, 5)) << "the late notify overtook its bytes";
  client->ctrl_send(0, 6);
  EXPECT_EQ(server->ctrl_recv(1, 20s), 6u);
}

// After TimeoutError a pipeline stops refilling its window, so the caller's buffer is not overwritten
// after it was told the get failed: at most the chunks in flight when the error was reported
// (window x chunk bytes) may still land.
TEST(SessionFailure, TimedOutPipelineStopsWritingTheCallersBuffer) {
  Fixture f;
  constexpr std::size_t kSize = 128u << 20, kChunk = 256, kWindow = 2;
  auto server = f.server("tcp", kSize);
  auto client = f.client(*server, 1, "tcp", kSize, 1s);
  fill(server->buffer(), 0, kSize, 7);
  EXPECT_THROW(client->get_pipeline(0, 0, 0, kSize, kChunk, kWindow), TimeoutError);
  std::vector<std::byte> at_error(kSize), later(kSize);
  client->buffer().read_to_cpu(at_error.data(), kSize, 0);
  std::this_thread::sleep_for(500ms);
  client->buffer().read_to_cpu(later.data(), kSize, 0);
  std::size_t changed = 0;
  for (std::size_t i = 0; i < kSize; ++i) changed += at_error[i] != later[i] ? 1 : 0;
  std::printf("bytes written after TimeoutError: %zu (bound %zu)\n", changed, kChunk * kWindow);
  EXPECT_LE(changed, kChunk * kWindow) << "the pipeline kept transferring after it reported the timeout";
  // The session still works.
  fill(client->buffer(), 0, 4096, 8);
  client->put(0, 0, 0, 4096);
  EXPECT_TRUE(holds(server->buffer(), 0, 4096, 8));
}

// Operations abandoned when their peer was lost must not keep has_pending() true (the loop's 2 ms
// safety timer would fire ~500 times a second): the loop thread sleeps again.
TEST(SessionFailure, LoopGoesIdleAfterAPeerIsLostWithGetsInFlight) {
  Fixture f;
  constexpr std::size_t kSize = 64u << 20;
  auto server = f.server("tcp", kSize);
  auto client = f.client(*server, 1, "tcp", kSize);
  std::vector<std::future<void>> ops;
  for (int i = 0; i < 16; ++i) ops.push_back(client->async_get(0, 0, 0, 4u << 20, asio::use_future));
  ops.push_back(client->async_get_pipeline(0, 0, 0, kSize, 64u << 10, 8, asio::use_future));
  server.reset();
  for (auto& op : ops) {
    try {
      op.get();
    } catch (const Error&) {
    }
  }
  test::LoopThread loop(*client);
  std::this_thread::sleep_for(300ms);  // the peer's removal and endpoint close settle
  const auto idle = loop.measure(1s);
  std::printf("loop thread after the peer loss: %ld wakeups/s, %ld preemptions/s, %.1f%% of a core\n", idle.wakeups,
              idle.preemptions, idle.cpu * 100.0);
  EXPECT_LT(idle.wakeups, 50) << "the loop keeps waking up with nothing to do";
  EXPECT_LT(idle.cpu, 0.05);
}

// A RegisteredMemory names a region of the session that made it; another session must refuse it
// (region ids are per session, so accepting it would pick that session's own region of that id).
TEST(SessionFailure, RegisteredMemoryOfAnotherSessionIsRefused) {
  Fixture f;
  auto server = f.server("shm", 1u << 20);
  auto client = f.client(*server, 1, "shm", 1u << 20);
  std::vector<std::byte> mine(4096, std::byte{1}), theirs(4096, std::byte{2});
  RegisteredMemory own = client->register_memory(mine.data(), mine.size());
  RegisteredMemory foreign = server->register_memory(theirs.data(), theirs.size());
  ASSERT_EQ(own.id(), foreign.id()) << "the ids collide, which is what makes this dangerous";
  EXPECT_THROW(client->async_put_from(foreign, 0, 0, 0, 4096, asio::use_future).get(), InvalidArgumentError);
  EXPECT_THROW(client->async_get_into(foreign, 0, 0, 0, 4096, asio::use_future).get(), InvalidArgumentError);
  client->async_put_from(own, 0, 0, 0, 4096, asio::use_future).get();
  std::vector<std::byte> got(4096);
  server->buffer().read_to_cpu(got.data(), got.size(), 0);
  EXPECT_EQ(got, mine);
}

// Two clients on one host both advertise (127.0.0.1, 0). The address table keeps both: the shared
// ip names both ranks, and once the second leaves it resolves to the first.
TEST(SessionFailure, TwoClientsOnOneHostStayDistinctAndLeaveNoStaleEntries) {
  Fixture f;
  auto server = f.server("shm", 1u << 20);
  auto first = f.client(*server, 1, "shm", 1u << 20);
  auto second = f.client(*server, 2, "shm", 1u << 20);
  try {
    server->resolve_peer("127.0.0.1", std::nullopt);
    ADD_FAILURE() << "an ip shared by two clients resolved to one of them";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
  }
  second.reset();
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (server->peers().size() != 1 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(server->resolve_peer("127.0.0.1", std::nullopt), 1u) << "the first client became unreachable";
}

// resolve_peer: exact (ip, port) when a port is given, every match named when several match.
TEST(SessionFailure, ResolvePeerNamesEveryMatchAndNeverFallsBackToTheIpAlone) {
  Fixture f;
  auto server = f.server("shm", 1u << 20);
  auto first = f.client(*server, 1, "shm", 1u << 20);
  auto second = f.client(*server, 2, "shm", 1u << 20);
  EXPECT_EQ(first->resolve_peer("127.0.0.1", kDataPort), 0u);
  EXPECT_EQ(first->resolve_peer("127.0.0.1", std::nullopt), 0u);
  EXPECT_THROW(first->resolve_peer("127.0.0.1", kDataPort + 1), NotConnectedError);  // never the ip alone
  EXPECT_THROW(first->resolve_peer("10.77.9.9", std::nullopt), NotConnectedError);
  for (std::optional<std::uint16_t> port : {std::optional<std::uint16_t>{}, std::optional<std::uint16_t>{0}}) {
    try {
      server->resolve_peer("127.0.0.1", port);
      ADD_FAILURE() << "two clients at 127.0.0.1 resolved to one";
    } catch (const InvalidArgumentError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("rank 1 (127.0.0.1:0)"), std::string::npos) << what;
      EXPECT_NE(what.find("rank 2 (127.0.0.1:0)"), std::string::npos) << what;
    }
  }
  second.reset();
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (server->peers().size() != 1 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(server->resolve_peer("127.0.0.1", std::nullopt), 1u) << "the lost peer's entry stayed";
  first.reset();
  const auto until2 = std::chrono::steady_clock::now() + 10s;
  while (!server->peers().empty() && std::chrono::steady_clock::now() < until2) std::this_thread::sleep_for(10ms);
  EXPECT_THROW(server->resolve_peer("127.0.0.1", std::nullopt), NotConnectedError);
}

// A server may name a client by its address before the client connects (the SDK guide's server
// does): wait_peer_at waits for it, times out when none comes, and a close wakes it.
TEST(SessionFailure, WaitPeerAtWaitsForAClientAndTimesOutOrClosesWhenNoneComes) {
  Fixture f;
  auto server = f.server("shm", 1u << 20);
  EXPECT_THROW(server->wait_peer_at("127.0.0.1", std::nullopt, 100ms), TimeoutError);
  auto waiting = std::async(std::launch::async, [&] { return server->wait_peer_at("127.0.0.1", std::nullopt, 20s); });
  auto client = f.client(*server, 3, "shm", 1u << 20);
  EXPECT_EQ(waiting.get(), 3u);
  EXPECT_EQ(server->wait_peer_at("127.0.0.1", std::nullopt, 1ms), 3u);                     // connected already: at once
  EXPECT_THROW(server->wait_peer_at("127.0.0.1", std::uint16_t{1}, 100ms), TimeoutError);  // never the ip alone
  auto pending = std::async(std::launch::async, [&] { return server->wait_peer_at("10.77.9.9", std::nullopt, 20s); });
  server->close();
  EXPECT_THROW(pending.get(), ClosedError);
}

// connect() to a port where nothing listens: its own timeout, not the session's, bounds the retries,
// and while it waits a warning every 5 s says whom it waits for (a user sees why nothing happens).
TEST(SessionFailure, ConnectToNobodyWarnsWhileItWaitsAndEndsAtItsOwnTimeout) {
  Fixture f;
  std::uint16_t dead_port;
  {
    asio::io_context io;
    asio::ip::tcp::acceptor a(io, asio::ip::tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    dead_port = a.local_endpoint().port();
  }
  auto o = test::session_options("shm", runtime::ProgressMode::event, 1u << 20, f.dir);
  o.timeout = 60s;
  Session client(o);
  std::mutex m;
  std::vector<std::string> notices;
  runtime::set_log_hook([&](runtime::LogLevel level, std::string_view line) {
    if (level != runtime::LogLevel::warn || line.find("still connecting") == std::string_view::npos) return;
    std::lock_guard<std::mutex> lock(m);
    notices.emplace_back(line);
  });
  const std::string where = "127.0.0.1:" + std::to_string(dead_port);
  try {
    client.connect(0, 1, "127.0.0.1", kDataPort, dead_port, ConnType::UCX, 7s);
    ADD_FAILURE() << "connected to a port nobody listens on";
  } catch (const NotConnectedError& e) {
    EXPECT_NE(std::string(e.what()).find("refused until the timeout of 7000 ms"), std::string::npos) << e.what();
  }
  runtime::set_log_hook({});
  std::lock_guard<std::mutex> lock(m);
  ASSERT_EQ(notices.size(), 1u);  // at 5 s; a 60 s wait would have said more
  EXPECT_NE(notices[0].find("still connecting to rank 0 at " + where + " (5 s of 7 s)"), std::string::npos)
      << notices[0];
  EXPECT_THROW(client.connect(0, 1, "127.0.0.1", kDataPort, dead_port, ConnType::UCX, 0ms), InvalidArgumentError);
}

// connect() names the server's data port: a port it does not serve must fail, not be accepted.
TEST(SessionFailure, ConnectWithTheWrongDataPortFails) {
  Fixture f;
  auto server = f.server("shm", 1u << 20);
  auto o = test::session_options("shm", runtime::ProgressMode::event, 1u << 20, f.dir);
  Session client(o);
  EXPECT_THROW(client.connect(0, 1, "127.0.0.1", kDataPort + 1, server->ctrl_port()), InvalidArgumentError);
  EXPECT_THROW(client.put(0, 0, 0, 8), NotConnectedError);
}

// File-backed mappings: UCX's shared-memory segments (posix /dev/shm, memfd, SysV) and loaded
// modules. Anonymous ones are left out: allocator arenas come and go with load, more under ASan.
std::size_t file_mapping_count() {
  std::ifstream maps("/proc/self/maps");
  std::size_t n = 0;
  for (std::string line; std::getline(maps, line);) n += line.find(" /") != std::string::npos;
  return n;
}

// engine-peer-release: a peer lost over the control channel got a forced endpoint close, which UCX
// 1.13 refuses for an endpoint in error mode NONE (every same-host peer): the endpoint stayed open
// and kept the departed peer's shared-memory segments mapped, 2 per peer.
TEST(SessionFailure, DepartedPeersLeaveNoMappingsBehind) {
  for (const char* tls : {"shm", "tcp"}) {
    SCOPED_TRACE(tls);
    Fixture f;
    auto server = f.server(tls, 1u << 20);
    std::size_t connected = 0;
    const auto cycle = [&] {
      auto client = f.client(*server, 1, tls, 1u << 20);
      fill(client->buffer(), 0, 4096, 5);
      client->put(0, 0, 0, 4096);
      connected = file_mapping_count();
      client.reset();
      const auto until = std::chrono::steady_clock::now() + 10s;
      while (!server->peers().empty() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(5ms);
      ASSERT_TRUE(server->peers().empty());
    };
    cycle();  // UCX loads its modules, pools and caches at their size
    std::this_thread::sleep_for(100ms);
    constexpr std::size_t kPeers = 8;
    const std::size_t before = file_mapping_count();
    std::printf("%s: %zu file mappings with no peer, %zu with one\n", tls, before, connected);
    if (std::string(tls) == "shm") {
      EXPECT_GT(connected, before) << "a peer's segments are not counted";
    }
    for (std::size_t i = 0; i < kPeers; ++i) cycle();
    const auto until = std::chrono::steady_clock::now() + 5s;  // the last endpoint close settles
    while (file_mapping_count() > before && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(10ms);
    std::printf("%s: %zu file mappings after %zu departed peers\n", tls, file_mapping_count(), kPeers);
    EXPECT_EQ(file_mapping_count(), before) << "departed peers left mappings behind";
  }
}

}  // namespace
}  // namespace hmc
