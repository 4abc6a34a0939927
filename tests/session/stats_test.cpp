// Session::stats() against real traffic: what it counts is what moved.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <numeric>
#include <vector>

#include "hmc/error.hpp"
#include "hmc/session.hpp"
#include "session_test_util.hpp"

using namespace std::chrono_literals;

namespace hmc {
namespace {

std::uint64_t samples(const OpStats& s) {
  return std::accumulate(s.latency_us.begin(), s.latency_us.end(), std::uint64_t{0});
}

class Stats : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    dir_ = test::temp_dir();
    const auto o = test::session_options(GetParam(), runtime::ProgressMode::event, 1u << 20, dir_);
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

TEST_P(Stats, CountsEveryKindOfOperationAndTheBytesItMoved) {
  for (int i = 0; i < 100; ++i) client->put(0, 0, 4096, 4096);
  for (int i = 0; i < 10; ++i) client->get(0, 8192, 0, 1000);
  client->put_batch(0, {{0, 0, 100}, {200, 300, 50}, {1000, 2000, 7}});  // three segments apart: one batch
  client->get_batch(0, {{0, 0, 10}, {100, 100, 20}});
  for (std::uint64_t i = 0; i < 5; ++i) client->put_notify(0, 0, 0, 64, i);
  for (std::uint64_t i = 0; i < 5; ++i) EXPECT_EQ(server->ctrl_recv(1, 20s), i);
  EXPECT_THROW(client->put(0, 0, 1u << 20, 1), OutOfRangeError);  // refused before it is an operation

  const SessionStats s = client->stats();
  EXPECT_EQ(s.put.done, 100u);
  EXPECT_EQ(s.put.bytes, 100u * 4096);
  EXPECT_EQ(s.get.done, 10u);
  EXPECT_EQ(s.get.bytes, 10u * 1000);
  EXPECT_EQ(s.put_batch.done, 1u);
  EXPECT_EQ(s.put_batch.bytes, 157u);
  EXPECT_EQ(s.get_batch.done, 1u);
  EXPECT_EQ(s.get_batch.bytes, 30u);
  EXPECT_EQ(s.put_notify.done, 5u);
  EXPECT_EQ(s.put_notify.bytes, 5u * 64);
  EXPECT_EQ(s.put.failed + s.put.timed_out + s.put.aborted, 0u);
  EXPECT_EQ(s.in_flight, 0u);
  // One operation in 16 is timed, counted over every operation the engine saw: 6 or 7 of 100 puts.
  EXPECT_GE(samples(s.put), 100u / OpStats::kSampleEvery);
  EXPECT_LE(samples(s.put), 100u / OpStats::kSampleEvery + 1);
  EXPECT_GT(s.put.latency_quantile_us(0.5), 0.0);
  EXPECT_LE(s.put.latency_quantile_us(0.5), s.put.latency_quantile_us(0.99));
  EXPECT_EQ(s.peers_connected, 1u);
  EXPECT_EQ(s.peers_lost, 0u);
  ASSERT_EQ(s.peers.size(), 1u);
  EXPECT_EQ(s.peers[0].rank, 0u);
  EXPECT_EQ(s.peers[0].transport, client->transports(0));
  EXPECT_EQ(s.peers[0].put_bytes, 100u * 4096 + 157 + 5 * 64);
  EXPECT_EQ(s.peers[0].get_bytes, 10u * 1000 + 30);
  EXPECT_EQ(s.peers[0].failed, 0u);
  client->ctrl_send(0, 77);  // over UCX once the fast path is up: a message of the data transport
  EXPECT_EQ(server->ctrl_recv(1, 20s), 77u);
  const SessionStats m = client->stats();
  EXPECT_EQ(m.message.done, s.message.done + 1);
  EXPECT_EQ(m.peers[0].message_bytes, s.peers[0].message_bytes + m.message.bytes - s.message.bytes);
  // The server moved nothing itself, and sees its client leave.
  EXPECT_EQ(server->stats().put.done, 0u);
  client.reset();
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (server->stats().peers_lost == 0 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(10ms);
  const SessionStats after = server->stats();
  EXPECT_EQ(after.peers_lost, 1u);
  EXPECT_EQ(after.peers_connected, 0u);
  EXPECT_TRUE(after.peers.empty());
}

TEST(StatsMath, QuantilesReadTheBucketBounds) {
  OpStats s;
  EXPECT_EQ(s.latency_quantile_us(0.5), 0.0);
  s.latency_us[3] = 90;   // under 8 us
  s.latency_us[10] = 10;  // under 1024 us
  EXPECT_EQ(s.latency_quantile_us(0.5), 8.0);
  EXPECT_EQ(s.latency_quantile_us(0.9), 8.0);
  EXPECT_EQ(s.latency_quantile_us(0.99), 1024.0);
  OpStats t = s;
  t += s;
  EXPECT_EQ(t.latency_us[10], 20u);
}

INSTANTIATE_TEST_SUITE_P(Transports, Stats, ::testing::Values("shm", "tcp"),
                         [](const ::testing::TestParamInfo<const char*>& p) { return std::string(p.param); });

}  // namespace
}  // namespace hmc
