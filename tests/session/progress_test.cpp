// Progress modes on a real connected pair: the default (adaptive) mode costs ~no CPU while idle.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdio>
#include <filesystem>
#include <future>

#include "session_test_util.hpp"

namespace hmc {
namespace {

using namespace std::chrono_literals;

// CPU time (user + system) of the thread that runs the session's loop, read on that thread.
std::chrono::microseconds loop_thread_cpu(Session& s) {
  std::promise<std::chrono::microseconds> cpu;
  runtime::asio::post(s.executor(), [&] {
    ::rusage ru{};
    ::getrusage(RUSAGE_THREAD, &ru);
    const auto us = [](const ::timeval& t) {
      return std::chrono::seconds(t.tv_sec) + std::chrono::microseconds(t.tv_usec);
    };
    cpu.set_value(us(ru.ru_utime) + us(ru.ru_stime));
  });
  return cpu.get_future().get();
}

TEST(SessionProgress, AdaptiveIsTheDefault) {
  EXPECT_EQ(SessionOptions{}.progress_mode, runtime::ProgressMode::adaptive);
}

class IdleCpu : public ::testing::TestWithParam<const char*> {};

TEST_P(IdleCpu, AConnectedPairInTheDefaultModeIdlesBelowFivePercentOfACore) {
  const std::string dir = test::temp_dir();
  auto options = test::session_options(GetParam(), SessionOptions{}.progress_mode, 1u << 20, dir);
  Session server(options);
  server.init_server("127.0.0.1", 18540, 0, 0, 0, dir);
  Session client(options);
  ASSERT_EQ(client.connect(0, 1, "127.0.0.1", 18540, server.ctrl_port()), 0u);
  server.wait_peer(1, 10s);
  // Traffic first, so that the adaptive spin has learnt short gaps before the pair goes idle.
  for (std::uint64_t i = 1; i <= 200; ++i) {
    test::fill(client.buffer(), 0, 64, i);
    client.put(0, 0, 0, 64);
    client.ctrl_send(0, i);
    ASSERT_EQ(server.ctrl_recv(1, 10s), i);
    ASSERT_TRUE(test::holds(server.buffer(), 0, 64, i));
  }
  std::this_thread::sleep_for(50ms);
  const auto server_before = loop_thread_cpu(server);
  const auto client_before = loop_thread_cpu(client);
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(1s);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double server_pct =
      100.0 * std::chrono::duration<double>(loop_thread_cpu(server) - server_before).count() / wall;
  const double client_pct =
      100.0 * std::chrono::duration<double>(loop_thread_cpu(client) - client_before).count() / wall;
  std::printf("idle loop thread CPU over %.2f s (%s, %s): server %.2f%%, client %.2f%% of a core\n", wall, GetParam(),
              std::string(runtime::to_string(options.progress_mode)).c_str(), server_pct, client_pct);
  EXPECT_LT(server_pct, 5.0);
  EXPECT_LT(client_pct, 5.0);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Transports, IdleCpu, ::testing::Values("shm", "tcp"));

}  // namespace
}  // namespace hmc
