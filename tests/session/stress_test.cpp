// Threads sharing one Session: every progress-thread choice x shm / tcp x 2, 4 and 8 threads, each
// thread mixing put, get, put_nb + wait, ctrl_send and ctrl_recv on its own region with every byte
// checked, then a close while the others still call in. Progress modes rotate over the cells.
// HMC_MATRIX_ROUNDS sets the rounds per thread (CI runs a short form; scripts/test --long many).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "session_test_util.hpp"

namespace hmc {
namespace {

using namespace std::chrono_literals;
using test::fill;
using test::holds;

constexpr std::size_t kRegion = 64u << 10;  // each thread's slice of both buffers
constexpr std::size_t kMaxThreads = 8;
constexpr std::size_t kBuffer = kRegion * kMaxThreads;
constexpr std::uint16_t kDataPort = 18590;

int rounds_per_thread() {
  const char* env = std::getenv("HMC_MATRIX_ROUNDS");
  const int n = env ? std::atoi(env) : 0;
  return n > 0 ? n : 40;
}

struct Cell {
  ProgressThread thread;
  const char* tls;
  int threads;
  runtime::ProgressMode mode;
};

const char* thread_name(ProgressThread t) {
  switch (t) {
    case ProgressThread::own: return "own";
    case ProgressThread::shared: return "shared";
    case ProgressThread::caller: return "caller";
  }
  return "?";
}

std::string cell_name(const Cell& c) {
  return std::string(thread_name(c.thread)) + "_" + c.tls + "_" + std::to_string(c.threads) + "threads_" +
         std::string(runtime::to_string(c.mode));
}

std::string name(const ::testing::TestParamInfo<Cell>& p) { return cell_name(p.param); }

// ctest's test names carry the parameter as gtest prints it.
void PrintTo(const Cell& c, std::ostream* os) { *os << cell_name(c); }

std::vector<Cell> cells() {
  const runtime::ProgressMode modes[] = {runtime::ProgressMode::adaptive, runtime::ProgressMode::event,
                                         runtime::ProgressMode::poll};
  std::vector<Cell> v;
  int i = 0;
  for (ProgressThread t : {ProgressThread::own, ProgressThread::shared, ProgressThread::caller})
    for (const char* tls : {"shm", "tcp"})
      for (int n : {2, 4, 8}) v.push_back({t, tls, n, modes[i++ % 3]});
  return v;
}

class Stress : public ::testing::TestWithParam<Cell> {
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

  void connect() {
    test::connect_pair(options(ProgressThread::own), options(GetParam().thread), dir, kDataPort, server, client);
  }

  // Waits for a non-blocking put or get: a caller-driven session must be driven by the waiter.
  void wait(std::future<void>& f) {
    if (GetParam().thread == ProgressThread::caller) {
      ASSERT_TRUE(client->progress_until([&] { return f.wait_for(0s) == std::future_status::ready; },
                                         std::chrono::steady_clock::now() + 20s));
      f.get();
    } else {
      Session::wait(f, 20s);
    }
  }

  // One user thread's rounds on its own region [t * kRegion, (t + 1) * kRegion).
  void rounds(int t, int n, std::vector<std::uint64_t>& echoes) {
    const std::size_t base = static_cast<std::size_t>(t) * kRegion;
    for (int i = 0; i < n; ++i) {
      const std::uint64_t seed = (static_cast<std::uint64_t>(t) << 32) | static_cast<std::uint32_t>(i);
      const std::size_t size =
          1 + (static_cast<std::size_t>(i) * 7919 + static_cast<std::size_t>(t) * 131) % (kRegion / 2);
      switch (i % 4) {
        case 0:  // put, checked at the server
          fill(client->buffer(), base, size, seed);
          client->put(0, base, base, size);
          ASSERT_TRUE(holds(server->buffer(), base, size, seed)) << "put round " << i;
          break;
        case 1:  // get of what the server wrote
          fill(server->buffer(), base + kRegion / 2, size, seed);
          client->get(0, base + kRegion / 2, base + kRegion / 2, size);
          ASSERT_TRUE(holds(client->buffer(), base + kRegion / 2, size, seed)) << "get round " << i;
          break;
        case 2: {  // put_nb + get_nb, waited for
          fill(client->buffer(), base, size, seed);
          fill(server->buffer(), base + kRegion / 2, size, seed + 1);
          auto put = client->put_nb(0, base, base, size);
          auto get = client->get_nb(0, base + kRegion / 2, base + kRegion / 2, size);
          wait(put);
          wait(get);
          ASSERT_TRUE(holds(server->buffer(), base, size, seed)) << "put_nb round " << i;
          ASSERT_TRUE(holds(client->buffer(), base + kRegion / 2, size, seed + 1)) << "get_nb round " << i;
          break;
        }
        case 3:  // a tag to the server, which echoes it; any thread's echo may come back here
          client->ctrl_send(0, seed);
          echoes.push_back(client->ctrl_recv(0, 20s));
          break;
      }
    }
  }

  std::string dir;
  std::unique_ptr<Session> server, client;
};

TEST_P(Stress, ThreadsSharingOneSessionMoveEveryByteAndCloseCleanly) {
  connect();
  const int threads = GetParam().threads;
  const int n = rounds_per_thread();
  const int tags_per_thread = n / 4;  // rounds with i % 4 == 3
  const int total_tags = tags_per_thread * threads;

  // The server echoes every tag back (tag + 1), so the clients' receives balance their sends.
  std::atomic<bool> echo_failed{false};
  std::vector<std::uint64_t> seen_by_server;
  std::thread echo([&] {
    try {
      for (int k = 0; k < total_tags; ++k) {
        const std::uint64_t tag = server->ctrl_recv(1, 30s);
        seen_by_server.push_back(tag);
        server->ctrl_send(1, tag + 1);
      }
    } catch (const std::exception& e) {
      echo_failed = true;
      ADD_FAILURE() << "echo: " << e.what();
    }
  });

  std::vector<std::vector<std::uint64_t>> echoes(static_cast<std::size_t>(threads));
  std::vector<std::thread> users;
  std::atomic<int> failed{0};
  for (int t = 0; t < threads; ++t) {
    users.emplace_back([&, t] {
      try {
        rounds(t, n, echoes[static_cast<std::size_t>(t)]);
      } catch (const std::exception& e) {
        ++failed;
        ADD_FAILURE() << "thread " << t << ": " << e.what();
      }
    });
  }
  for (auto& u : users) u.join();
  echo.join();
  ASSERT_EQ(failed.load(), 0);
  ASSERT_FALSE(echo_failed.load());

  // Every tag sent arrived once, and every echo came back once (to whichever thread received).
  std::vector<std::uint64_t> sent, back;
  for (int t = 0; t < threads; ++t)
    for (int i = 3; i < n; i += 4)
      sent.push_back((static_cast<std::uint64_t>(t) << 32) | static_cast<std::uint32_t>(i));
  for (const auto& e : echoes) back.insert(back.end(), e.begin(), e.end());
  std::vector<std::uint64_t> got = seen_by_server;
  std::sort(sent.begin(), sent.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, sent) << "the server's tags";
  for (auto& b : back) --b;
  std::sort(back.begin(), back.end());
  EXPECT_EQ(back, sent) << "the echoes";

  // A close while the other threads still put: each call succeeds or fails with a typed error.
  std::atomic<bool> closing{false};
  std::atomic<int> untyped{0};
  std::vector<std::thread> late;
  for (int t = 1; t < threads; ++t) {
    late.emplace_back([&, t] {
      const std::size_t base = static_cast<std::size_t>(t) * kRegion;
      for (int i = 0; i < 200; ++i) {
        try {
          client->put(0, base, base, 256);
        } catch (const Error&) {
          if (closing.load()) return;  // closed under us: the typed error we expect
        } catch (...) {
          ++untyped;
          return;
        }
      }
    });
  }
  std::this_thread::sleep_for(2ms);
  closing = true;
  client->close();
  for (auto& l : late) l.join();
  EXPECT_EQ(untyped.load(), 0) << "a call after close failed with something other than hmc::Error";
  EXPECT_THROW(client->put(0, 0, 0, 8), Error) << "a put after close";
}

INSTANTIATE_TEST_SUITE_P(Matrix, Stress, ::testing::ValuesIn(cells()), name);

}  // namespace
}  // namespace hmc
