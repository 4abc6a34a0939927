// A Session destroyed by a completion handler running on its own loop thread (the last owner
// dropped inside a callback): no std::terminate, the loop thread ends, nothing leaks (ASan).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <future>
#include <string>
#include <thread>

#include "session_test_util.hpp"

namespace hmc {
namespace {

using namespace std::chrono_literals;

// Whether a thread of this process (a Linux tid) still exists.
bool thread_alive(pid_t tid) { return std::filesystem::exists("/proc/self/task/" + std::to_string(tid)); }

// The Linux tid of the thread that runs the session's loop.
pid_t loop_tid(Session& s) {
  std::promise<pid_t> tid;
  runtime::asio::post(s.executor(), [&] { tid.set_value(::gettid()); });
  return tid.get_future().get();
}

bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds limit = 10s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(2ms);
  }
  return pred();
}

class SessionTeardown : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = test::temp_dir();
    server = std::make_unique<Session>(options());
    server->init_server("127.0.0.1", 18530, 0, 0, 0, dir);
  }
  void TearDown() override {
    server.reset();
    std::filesystem::remove_all(dir);
  }
  SessionOptions options() const { return test::session_options("shm", runtime::ProgressMode::event, 1u << 20, dir); }
  std::unique_ptr<Session> connected_client() {
    auto c = std::make_unique<Session>(options());
    EXPECT_EQ(c->connect(0, 1, "127.0.0.1", 18530, server->ctrl_port()), 0u);
    server->wait_peer(1, 10s);
    return c;
  }

  std::string dir;
  std::unique_ptr<Session> server;
};

TEST_F(SessionTeardown, LastSharedOwnerDroppedInsideAPutCallback) {
  std::shared_ptr<Session> client = connected_client();
  const pid_t client_loop = loop_tid(*client);
  test::fill(client->buffer(), 0, 4096, 7);
  Session& c = *client;
  std::promise<std::exception_ptr> done;
  c.async_put(0, 0, 64, 4096, [owner = std::move(client), &done](std::exception_ptr e) mutable {
    owner.reset();  // ~Session on its own loop thread, inside run()
    done.set_value(e);
  });
  auto f = done.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(f.get(), nullptr);
  EXPECT_TRUE(test::holds(server->buffer(), 64, 4096, 7));
  EXPECT_TRUE(eventually([&] { return server->peers().empty(); })) << "the server sees the client go";
  EXPECT_TRUE(eventually([&] { return !thread_alive(client_loop); })) << "the client's loop thread must end";
}

TEST_F(SessionTeardown, UniqueOwnerResetInsideACtrlRecvCallback) {
  std::unique_ptr<Session> client = connected_client();
  const pid_t client_loop = loop_tid(*client);
  Session& c = *client;
  std::promise<std::uint64_t> got;
  c.async_ctrl_recv(0, 10s, [&client, &got](std::exception_ptr e, CtrlMessage m) {
    client.reset();
    got.set_value(e ? 0 : m.tag());
  });
  server->ctrl_send(1, 42);
  auto f = got.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(f.get(), 42u);
  EXPECT_TRUE(eventually([&] { return server->peers().empty(); }));
  EXPECT_TRUE(eventually([&] { return !thread_alive(client_loop); }));
}

TEST_F(SessionTeardown, CallerDrivenSessionDestroyedInsideACallbackThatProgressRuns) {
  auto o = options();
  o.progress_thread = ProgressThread::caller;
  auto client = std::make_unique<Session>(o);
  ASSERT_EQ(client->connect(0, 1, "127.0.0.1", 18530, server->ctrl_port()), 0u);
  server->wait_peer(1, 10s);
  Session& c = *client;
  bool destroyed = false;
  c.async_put(0, 0, 0, 64, [&](std::exception_ptr) {
    client.reset();  // inside progress(): the loop is freed once progress() returns
    destroyed = true;
  });
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!destroyed && std::chrono::steady_clock::now() < deadline) c.progress();
  EXPECT_TRUE(destroyed);
  EXPECT_TRUE(eventually([&] { return server->peers().empty(); }));
}

// Destroying a Session with thousands of completions queued: every handler runs once (done or
// failed), none after the session's state is gone (ASan), whichever thread destroys it.
TEST_F(SessionTeardown, ManyQueuedCompletionsWhenDestroyedFromAnotherThread) {
  std::unique_ptr<Session> client = connected_client();
  constexpr int kOps = 4000;
  auto ran = std::make_shared<std::atomic<int>>(0);
  for (int i = 0; i < kOps; ++i)
    client->async_put(0, 64 * (i % 64), 64 * (i % 64), 64, [ran](std::exception_ptr) { ++*ran; });
  client.reset();
  EXPECT_EQ(ran->load(), kOps);
  EXPECT_TRUE(eventually([&] { return server->peers().empty(); }));
}

TEST_F(SessionTeardown, ManyQueuedCompletionsWhenDestroyedInsideTheFirstCallback) {
  std::shared_ptr<Session> client = connected_client();
  const pid_t client_loop = loop_tid(*client);
  constexpr int kOps = 4000;
  auto ran = std::make_shared<std::atomic<int>>(0);
  Session& c = *client;
  std::promise<void> issued;
  runtime::asio::post(c.executor(), [f = issued.get_future().share()] { f.wait(); });  // holds the loop
  c.async_put(0, 0, 0, 64, [client, ran](std::exception_ptr) mutable {
    ++*ran;
    client.reset();  // the last owner, with the other puts still queued
  });
  for (int i = 1; i < kOps; ++i)
    c.async_put(0, 64 * (i % 64), 64 * (i % 64), 64, [ran](std::exception_ptr) { ++*ran; });
  client.reset();
  issued.set_value();
  EXPECT_TRUE(eventually([&] { return !thread_alive(client_loop); }));
  EXPECT_EQ(ran->load(), kOps);
}

}  // namespace
}  // namespace hmc
