// GPU staging over real UCX (tcp, shared memory) with EMULATED device memory: host memory labelled
// NVIDIA_GPU, copied with memcpy through the device-copy seam. The staging protocol (bounce slots,
// host mirror, stage requests) runs for real; what only a real GPU proves is in gpu_device_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "../session/session_test_util.hpp"
#include "emulated_device.hpp"
#include "hmc/error.hpp"
#include "hmc/session.hpp"
#include "staging/staging_wire.hpp"

namespace hmc {
namespace {

using namespace std::chrono_literals;
using test::fill;
using test::holds;

constexpr std::size_t kBuffer = (16u << 20) + (1u << 20);
constexpr std::size_t kChunk = 256u << 10;  // 4 bounce slots of 256 KiB: an 8 MiB transfer reuses each 8 times
constexpr std::uint16_t kDataPort = 18631;

bool ucx_moves_cuda() {
  SessionOptions o;
  o.buffer_size = 4096;
  Session probe(o);
  const auto types = probe.native_memory_types();
  return std::find(types.begin(), types.end(), MemoryType::NVIDIA_GPU) != types.end();
}

struct Sides {
  MemoryType server, client;
};

class StagingTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (ucx_moves_cuda()) GTEST_SKIP() << "this UCX moves CUDA memory itself: the staging path is not used";
    emulation = std::make_unique<detail::DeviceEmulation>(MemoryType::NVIDIA_GPU);
    dir = test::temp_dir();
  }
  void TearDown() override {
    client.reset();
    server.reset();
    emulation.reset();
    if (!dir.empty()) std::filesystem::remove_all(dir);
  }
  SessionOptions options(MemoryType type, std::chrono::milliseconds timeout = 10s) {
    SessionOptions o = test::session_options(GetParam(), runtime::ProgressMode::adaptive, kBuffer, dir);
    o.mem_type = type;
    o.staging_bytes = 4 * kChunk;
    o.staging_chunk = kChunk;
    o.timeout = timeout;
    return o;
  }
  void connect(Sides s, std::chrono::milliseconds timeout = 10s) {
    server = std::make_unique<Session>(options(s.server, timeout));
    server->init_server("127.0.0.1", kDataPort, 0, 0, 0, dir);
    client = std::make_unique<Session>(options(s.client, timeout));
    ASSERT_EQ(client->connect(0, 1, "127.0.0.1", kDataPort, server->ctrl_port()), 0u);
    server->wait_peer(1, 10s);
  }

  std::unique_ptr<detail::DeviceEmulation> emulation;
  std::string dir;
  std::unique_ptr<Session> server, client;
};

TEST_P(StagingTest, UcxHereMovesOnlyHostMemoryAndDeviceBuffersAreStaged) {
  connect({MemoryType::NVIDIA_GPU, MemoryType::CPU});
  EXPECT_EQ(client->native_memory_types(), std::vector<MemoryType>{MemoryType::CPU});
  EXPECT_TRUE(server->buffer_staged());
  EXPECT_FALSE(client->buffer_staged());
  EXPECT_EQ(server->buffer().type(), MemoryType::NVIDIA_GPU);
  EXPECT_NE(client->transports(0).find("(staged)"), std::string::npos) << client->transports(0);
}

// Every pairing of device and host buffers, sizes from 1 byte to 8 MiB around the chunk size.
TEST_P(StagingTest, PutAndGetArriveIntactForEverySizeAndPairing) {
  const Sides pairings[] = {{MemoryType::NVIDIA_GPU, MemoryType::NVIDIA_GPU},
                            {MemoryType::NVIDIA_GPU, MemoryType::CPU},
                            {MemoryType::CPU, MemoryType::NVIDIA_GPU}};
  const std::size_t sizes[] = {1, 7, kChunk - 1, kChunk, kChunk + 1, 3 * kChunk + 5, 8u << 20};
  for (const Sides& s : pairings) {
    SCOPED_TRACE(std::string(to_string(s.server)) + " server, " + std::string(to_string(s.client)) + " client");
    connect(s);
    std::uint64_t seed = 10;
    for (std::size_t n : sizes) {
      SCOPED_TRACE(n);
      const std::size_t local = 3, remote = 1001;  // unaligned on purpose
      fill(client->buffer(), local, n, ++seed);
      client->put(0, local, remote, n);
      EXPECT_TRUE(holds(server->buffer(), remote, n, seed)) << "put";
      fill(server->buffer(), remote + 5, n, ++seed);
      client->get(0, local + 11, remote + 5, n);
      EXPECT_TRUE(holds(client->buffer(), local + 11, n, seed)) << "get";
    }
    client.reset();
    server.reset();
  }
  EXPECT_GT(emulation->copies(), 0u);
}

// put-with-notify through staging: the tag leaves only once the bytes reached the peer's device buffer.
// stats() counts each side's copies through pinned host memory: all the device saw, every byte once a side.
TEST_P(StagingTest, StatsCountEveryStagingCopyAndItsBytes) {
  connect({MemoryType::NVIDIA_GPU, MemoryType::NVIDIA_GPU});
  auto staged = [&] {
    const SessionStats c = client->stats(), s = server->stats();
    return std::pair{c.staging.copies + s.staging.copies, c.staging.bytes + s.staging.bytes};
  };
  const auto [copies0, bytes0] = staged();
  const std::uint64_t device0 = emulation->copies();
  const std::size_t n = 3 * kChunk + 5;
  fill(client->buffer(), 0, n, 1);
  client->put(0, 0, 0, n);
  client->get(0, n, 0, n);
  EXPECT_TRUE(holds(client->buffer(), n, n, 1));
  const auto [copies, bytes] = staged();
  EXPECT_EQ(copies - copies0, emulation->copies() - device0);
  EXPECT_EQ(bytes - bytes0, 4 * n);  // each way: out of one device, into the other
  EXPECT_EQ(client->stats().put.bytes, n);
}

TEST_P(StagingTest, PutNotifyTagsFollowTheirBytesIntoAStagedBuffer) {
  const Sides pairings[] = {{MemoryType::NVIDIA_GPU, MemoryType::NVIDIA_GPU},
                            {MemoryType::NVIDIA_GPU, MemoryType::CPU},
                            {MemoryType::CPU, MemoryType::NVIDIA_GPU}};
  for (const Sides& s : pairings) {
    SCOPED_TRACE(std::string(to_string(s.server)) + " server, " + std::string(to_string(s.client)) + " client");
    connect(s);
    for (std::uint64_t round = 0; round < 20; ++round) {
      const std::size_t n = round % 2 == 0 ? 100 : kChunk + 7;
      fill(client->buffer(), 0, n, 300 + round);
      client->put_notify(0, 0, 4096, n, round);
      EXPECT_EQ(server->ctrl_recv(1, 5s), round);
      EXPECT_TRUE(holds(server->buffer(), 4096, n, 300 + round)) << round;
    }
    client.reset();
    server.reset();
  }
}

TEST_P(StagingTest, BatchesAndPipelinesThroughStagedBuffersOnBothSides) {
  connect({MemoryType::NVIDIA_GPU, MemoryType::NVIDIA_GPU});
  std::vector<Segment> segs;
  for (std::size_t i = 0; i < 5; ++i) {
    const Segment s{i * (kChunk + 3), (4u << 20) + i * (kChunk + 17), kChunk / 2 + i * 1000 + 1};
    fill(client->buffer(), s.local_offset, s.size, 100 + i);
    segs.push_back(s);
  }
  client->put_batch(0, segs);
  for (std::size_t i = 0; i < segs.size(); ++i)
    EXPECT_TRUE(holds(server->buffer(), segs[i].remote_offset, segs[i].size, 100 + i));

  const std::size_t n = (5u << 20) + 3;
  fill(client->buffer(), 17, n, 200);
  client->put_pipeline(0, 17, 9 << 20, n, 100000, 3);
  EXPECT_TRUE(holds(server->buffer(), 9 << 20, n, 200));
  fill(server->buffer(), 1 << 20, n, 201);
  client->get_pipeline(0, 8 << 20, 1 << 20, n, 300000, 2);
  EXPECT_TRUE(holds(client->buffer(), 8 << 20, n, 201));
}

TEST_P(StagingTest, RegisteredDeviceMemoryIsStagedOnAHostSession) {
  connect({MemoryType::CPU, MemoryType::CPU});
  detail::EmulatedDeviceMemory device(MemoryType::NVIDIA_GPU, 0);
  const std::size_t n = (3u << 20) + 77;
  void* mem = device.allocate(n);
  {
    RegisteredMemory reg = client->register_memory(mem, n, MemoryType::NVIDIA_GPU);
    const auto before = emulation->copies();
    const auto p = test::pattern(n, 300);
    device.copy_host_to_device(mem, p.data(), n);
    client->async_put_from(reg, 0, 0, 4096, n, runtime::asio::use_future).get();
    EXPECT_TRUE(holds(server->buffer(), 4096, n, 300));
    fill(server->buffer(), 1 << 20, n - 5, 301);
    client->async_get_into(reg, 5, 0, 1 << 20, n - 5, runtime::asio::use_future).get();
    std::vector<std::byte> got(n - 5);
    device.copy_device_to_host(got.data(), static_cast<std::byte*>(mem) + 5, n - 5);
    EXPECT_EQ(got, test::pattern(n - 5, 301));
    EXPECT_GT(emulation->copies(), before) << "registered device memory must go through the device copier";
  }
  device.free(mem, n);
}

TEST_P(StagingTest, AStalledDeviceCopyTimesOutAndTheSessionStaysUsable) {
  connect({MemoryType::CPU, MemoryType::NVIDIA_GPU}, 1500ms);
  emulation->stall(true);
  fill(client->buffer(), 0, 1000, 400);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(client->put(0, 0, 0, 1000), TimeoutError);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  emulation->stall(false);  // the stalled copy keeps its slot; the others still serve
  client->put(0, 0, 0, 1000);
  EXPECT_TRUE(holds(server->buffer(), 0, 1000, 400));
}

TEST_P(StagingTest, ADeviceCopyFaultFailsTheOperationWithATypedError) {
  connect({MemoryType::NVIDIA_GPU, MemoryType::NVIDIA_GPU});
  emulation->fail_next(1);
  EXPECT_THROW(client->put(0, 0, 0, 3 * kChunk), Error);
  emulation->fail_next(0);
  fill(client->buffer(), 0, 3 * kChunk, 500);
  client->put(0, 0, 0, 3 * kChunk);
  EXPECT_TRUE(holds(server->buffer(), 0, 3 * kChunk, 500));
}

TEST_P(StagingTest, APeerLostWhileItStagesFailsThePutWithPeerLost) {
  connect({MemoryType::NVIDIA_GPU, MemoryType::CPU}, 20s);
  emulation->stall(true);  // the server's stage-in copy never ends: the client waits for its answer
  auto put = client->put_nb(0, 0, 0, 2 * kChunk);
  std::this_thread::sleep_for(300ms);
  EXPECT_NE(put.wait_for(0s), std::future_status::ready);
  server->close();
  EXPECT_EQ(put.wait_for(15s), std::future_status::ready);
  EXPECT_THROW(put.get(), PeerLostError);
  emulation->stall(false);
}

INSTANTIATE_TEST_SUITE_P(Ucx, StagingTest, ::testing::Values("shm", "tcp"),
                         [](const auto& p) { return std::string(p.param); });

TEST(StagingWire, StageMessagesRoundTripAndGarbageIsRefused) {
  using namespace detail;
  const StageMessage req{StageKind::stage_out, 7, 1u << 20, 4096, 0};
  const auto bytes = encode_stage_message(req);
  const auto back = decode_stage_message(bytes);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->kind, StageKind::stage_out);
  EXPECT_EQ(back->id, 7u);
  EXPECT_EQ(back->offset, 1u << 20);
  EXPECT_EQ(back->size, 4096u);
  auto truncated = bytes;
  truncated.pop_back();
  EXPECT_FALSE(decode_stage_message(truncated));
  auto bad_kind = bytes;
  bad_kind[1] = std::byte{9};
  EXPECT_FALSE(decode_stage_message(bad_kind));
  const auto info = add_staging_prefix(std::vector<std::byte>(5, std::byte{1}), 2);
  EXPECT_TRUE(has_staging_prefix(info));
  EXPECT_EQ(strip_staging_prefix(info).size(), 5u);
  EXPECT_FALSE(has_staging_prefix(std::vector<std::byte>(5, std::byte{1})));
}

}  // namespace
}  // namespace hmc
