// ProgressThread::caller: a Session without a loop thread, driven by its blocking calls and by
// progress(); several user threads at once; a session nobody drives; the wakeup fd. And
// ProgressThread::shared: the same with a keeper thread for the times nobody calls in.
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <set>
#include <thread>
#include <vector>

#include "session_test_util.hpp"

namespace hmc {
namespace {

using namespace std::chrono_literals;
using test::fill;
using test::holds;

constexpr std::size_t kBuffer = 4u << 20;
constexpr std::uint16_t kDataPort = 18550;

struct Param {
  const char* tls;
  runtime::ProgressMode mode;
};

std::string name(const ::testing::TestParamInfo<Param>& p) {
  return std::string(p.param.tls) + "_" + std::string(runtime::to_string(p.param.mode));
}

class CallerThread : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override { dir = test::temp_dir(); }
  void TearDown() override {
    client.reset();
    server.reset();
    std::filesystem::remove_all(dir);
  }
  SessionOptions options(ProgressThread thread) const {
    auto o = test::session_options(GetParam().tls, GetParam().mode, kBuffer, dir);
    o.progress_thread = thread;
    return o;
  }
  // A server with its own thread and a caller-driven client, connected.
  void connect_to_own_thread_server() {
    test::connect_pair(options(ProgressThread::own), options(ProgressThread::caller), dir, kDataPort, server, client);
  }

  std::string dir;
  std::unique_ptr<Session> server, client;
};

TEST_P(CallerThread, BlockingCallsDriveTheLoopThemselves) {
  connect_to_own_thread_server();
  for (std::uint64_t i = 1; i <= 50; ++i) {
    const std::size_t n = 1 + (i * 977) % 65536;
    fill(client->buffer(), 0, n, i);
    client->put(0, 0, 4096, n);
    client->ctrl_send(0, i);
    ASSERT_EQ(server->ctrl_recv(1, 10s), i);
    ASSERT_TRUE(holds(server->buffer(), 4096, n, i)) << "put " << i;
    fill(server->buffer(), 1u << 20, n, i + 1000);
    server->ctrl_send(1, i + 1000);
    ASSERT_EQ(client->ctrl_recv(0, 10s), i + 1000);
    client->get(0, 2u << 20, 1u << 20, n);
    ASSERT_TRUE(holds(client->buffer(), 2u << 20, n, i + 1000)) << "get " << i;
  }
}

TEST_P(CallerThread, BothSidesCallerDrivenPingPong) {
  server = std::make_unique<Session>(options(ProgressThread::caller));
  server->init_server("127.0.0.1", kDataPort, 0, 0, 0, dir);
  client = std::make_unique<Session>(options(ProgressThread::caller));
  constexpr std::uint64_t kRounds = 50;
  // The server's thread drives it through its own blocking calls only.
  auto served = std::async(std::launch::async, [&] {
    server->wait_peer(1, 10s);
    for (std::uint64_t i = 1; i <= kRounds; ++i) {
      const std::uint64_t tag = server->ctrl_recv(1, 10s);
      if (tag != i || !holds(server->buffer(), 0, 4096, i)) return false;
      server->ctrl_send(1, tag);
    }
    return true;
  });
  ASSERT_EQ(client->connect(0, 1, "127.0.0.1", kDataPort, server->ctrl_port()), 0u);
  for (std::uint64_t i = 1; i <= kRounds; ++i) {
    fill(client->buffer(), 0, 4096, i);
    client->put(0, 0, 0, 4096);
    client->ctrl_send(0, i);
    ASSERT_EQ(client->ctrl_recv(0, 10s), i);
  }
  EXPECT_TRUE(served.get());
}

TEST_P(CallerThread, FourThreadsShareOneCallerDrivenSession) {
  connect_to_own_thread_server();
  constexpr int kThreads = 4;
  constexpr int kOps = 40;
  constexpr std::size_t kSlot = 8192;  // one remote slot per (thread, op): nothing is overwritten
  auto seed = [](int t, int i) { return std::uint64_t(t) * 1000 + std::uint64_t(i) + 1; };
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        const std::size_t local = std::size_t(t) * 2 * kSlot;
        for (int i = 0; i < kOps; ++i) {
          const std::size_t remote = std::size_t(t * kOps + i) * kSlot;
          fill(client->buffer(), local, kSlot, seed(t, i));
          client->put(0, local, remote, kSlot);
          client->ctrl_send(0, seed(t, i));
          client->get(0, local + kSlot, remote, kSlot);
          if (!holds(client->buffer(), local + kSlot, kSlot, seed(t, i))) ++failures;
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << "thread " << t << ": " << e.what();
        ++failures;
      }
    });
  }
  std::set<std::uint64_t> tags;
  for (int k = 0; k < kThreads * kOps; ++k) {
    const std::uint64_t tag = server->ctrl_recv(1, 20s);
    const int t = int((tag - 1) / 1000), i = int((tag - 1) % 1000);
    EXPECT_TRUE(holds(server->buffer(), std::size_t(t * kOps + i) * kSlot, kSlot, tag)) << "tag " << tag;
    tags.insert(tag);
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(tags.size(), std::size_t(kThreads * kOps));
}

TEST_P(CallerThread, FourThreadsReceivingTagsAtOnce) {
  connect_to_own_thread_server();
  constexpr int kThreads = 4;
  constexpr int kPerThread = 25;
  std::vector<std::future<std::vector<std::uint64_t>>> got;
  for (int t = 0; t < kThreads; ++t) {
    got.push_back(std::async(std::launch::async, [&] {
      std::vector<std::uint64_t> mine;
      for (int i = 0; i < kPerThread; ++i) mine.push_back(client->ctrl_recv(0, 20s));
      return mine;
    }));
  }
  for (std::uint64_t tag = 1; tag <= kThreads * kPerThread; ++tag) server->ctrl_send(1, tag);
  std::set<std::uint64_t> all;
  for (auto& f : got) {
    const auto mine = f.get();
    EXPECT_TRUE(std::is_sorted(mine.begin(), mine.end())) << "one receiver sees the sender's order";
    all.insert(mine.begin(), mine.end());
  }
  EXPECT_EQ(all.size(), std::size_t(kThreads * kPerThread));
}

TEST_P(CallerThread, ProgressDrivesAsyncOpsAndRunsCallbacksOnThisThread) {
  connect_to_own_thread_server();
  const int fd = client->wakeup_fd();
  constexpr int kOps = 16;
  int done = 0;
  bool all_here = true;
  std::exception_ptr first_error;
  const auto me = std::this_thread::get_id();
  for (int i = 0; i < kOps; ++i) {
    fill(client->buffer(), std::size_t(i) * 4096, 4096, std::uint64_t(i) + 77);
    client->async_put(0, std::size_t(i) * 4096, std::size_t(i) * 4096, 4096, [&](std::exception_ptr e) {
      if (e && !first_error) first_error = e;
      all_here = all_here && std::this_thread::get_id() == me;
      ++done;
    });
  }
  std::uint64_t tag = 0;
  client->async_ctrl_recv(0, 10s, [&](std::exception_ptr e, CtrlMessage m) {
    if (e && !first_error) first_error = e;
    all_here = all_here && std::this_thread::get_id() == me;
    tag = m.tag();
    ++done;
  });
  // From another thread: the server's send completes only once this side progresses.
  auto sent = std::async(std::launch::async, [&] { server->ctrl_send(1, 5); });
  // An outside event loop in miniature: sleep on the wakeup fd, progress when it is readable.
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (done < kOps + 1 && std::chrono::steady_clock::now() < deadline) {
    ::pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, 1000);
    client->progress();
  }
  sent.get();
  ASSERT_EQ(done, kOps + 1);
  if (first_error) std::rethrow_exception(first_error);
  EXPECT_TRUE(all_here) << "callbacks run on the thread that calls progress()";
  EXPECT_EQ(tag, 5u);
  for (int i = 0; i < kOps; ++i)
    EXPECT_TRUE(holds(server->buffer(), std::size_t(i) * 4096, 4096, std::uint64_t(i) + 77)) << i;
}

TEST_P(CallerThread, NobodyDrivesNoProgressYetBlockingCallsNeverHang) {
  connect_to_own_thread_server();
  std::atomic<bool> put_done{false};
  fill(client->buffer(), 0, 4096, 3);
  client->async_put(0, 0, 0, 4096, [&](std::exception_ptr) { put_done = true; });
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(put_done.load()) << "nothing runs a caller-driven session nobody drives";
  // A blocking call drives the loop itself, and keeps its own timeout while doing so.
  EXPECT_THROW(client->ctrl_recv(0, 200ms), TimeoutError);
  client->put(0, 4096, 4096, 64);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!put_done.load() && std::chrono::steady_clock::now() < deadline) client->progress();
  EXPECT_TRUE(put_done.load());
  EXPECT_TRUE(holds(server->buffer(), 0, 4096, 3));
}

TEST_P(CallerThread, TimeoutsHoldForEveryWaitingThread) {
  connect_to_own_thread_server();
  std::vector<std::future<bool>> timed_out;
  for (int t = 0; t < 4; ++t) {
    timed_out.push_back(std::async(std::launch::async, [&] {
      try {
        client->ctrl_recv(0, 300ms);
      } catch (const TimeoutError&) {
        return true;
      }
      return false;
    }));
  }
  for (auto& f : timed_out) {
    ASSERT_EQ(f.wait_for(20s), std::future_status::ready) << "a follower hung past its timeout";
    EXPECT_TRUE(f.get());
  }
}

// ProgressThread::shared: its keeper makes progress while nobody calls in (a passive target over
// tcp, the control channel's accept), and its blocking calls drive the loop themselves.
TEST_P(CallerThread, SharedSessionProgressesWhileNobodyCallsItAndItsCallersDrive) {
  server = std::make_unique<Session>(options(ProgressThread::shared));
  server->init_server("127.0.0.1", kDataPort, 0, 0, 0, dir);
  client = std::make_unique<Session>(options(ProgressThread::own));
  ASSERT_EQ(client->connect(0, 1, "127.0.0.1", kDataPort, server->ctrl_port()), 0u) << "accepted by the keeper";
  constexpr std::size_t n = 64u << 10;
  for (std::uint64_t i = 1; i <= 20; ++i) {
    fill(client->buffer(), 0, n, i);
    client->put(0, 0, 0, n);  // the server calls nothing meanwhile: over tcp its keeper progresses
    client->ctrl_send(0, i);
  }
  EXPECT_THROW(server->wakeup_fd(), InvalidArgumentError) << "an outside selector is for ProgressThread::caller";
  for (std::uint64_t i = 1; i <= 20; ++i) ASSERT_EQ(server->ctrl_recv(1, 10s), i);
  EXPECT_TRUE(holds(server->buffer(), 0, n, 20));
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (std::size_t k = 0; k < 3; ++k) {
    threads.emplace_back([&, k] {
      try {
        for (std::uint64_t i = 0; i < 100; ++i) {
          fill(server->buffer(), (1u << 20) + k * 4096, 4096, k * 1000 + i);
          server->put(1, (1u << 20) + k * 4096, (1u << 20) + k * 4096, 4096);
          if (!holds(client->buffer(), (1u << 20) + k * 4096, 4096, k * 1000 + i)) ++failures;
        }
      } catch (const Error&) {
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_P(CallerThread, OwnThreadSessionsHaveNoWakeupFdAndProgressIsANoOp) {
  Session s(options(ProgressThread::own));
  EXPECT_EQ(s.progress(), 0u);
  EXPECT_THROW(s.wakeup_fd(), InvalidArgumentError);
}

INSTANTIATE_TEST_SUITE_P(TransportsAndModes, CallerThread,
                         ::testing::Values(Param{"shm", runtime::ProgressMode::adaptive},
                                           Param{"shm", runtime::ProgressMode::event},
                                           Param{"tcp", runtime::ProgressMode::adaptive}),
                         name);

}  // namespace
}  // namespace hmc
