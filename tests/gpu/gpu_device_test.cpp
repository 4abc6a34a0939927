// GPU staging on a real CUDA / HIP device: the same put/get paths as staging_test.cpp with real
// device memory, streams and pinned host memory. Skips, with its reason, where there is no device
// (or where UCX moves the device memory itself, so no staging happens).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "../session/session_test_util.hpp"
#include "hmc/memory.hpp"
#include "hmc/session.hpp"

namespace hmc {
namespace {

using namespace std::chrono_literals;
using test::fill;
using test::holds;

constexpr std::size_t kBuffer = 16u << 20;
constexpr std::uint16_t kDataPort = 18641;

class RealDeviceStagingTest : public ::testing::TestWithParam<MemoryType> {
 protected:
  void SetUp() override {
    std::string why;
    if (!Memory::available(GetParam(), 0, &why)) GTEST_SKIP() << "no " << to_string(GetParam()) << " device: " << why;
    dir = test::temp_dir();
  }
  void TearDown() override {
    client.reset();
    server.reset();
    if (!dir.empty()) std::filesystem::remove_all(dir);
  }
  void connect(const char* tls, MemoryType server_type, MemoryType client_type) {
    auto options = [&](MemoryType t) {
      SessionOptions o = test::session_options(tls, runtime::ProgressMode::adaptive, kBuffer, dir);
      o.mem_type = t;
      o.staging_chunk = 256u << 10;
      return o;
    };
    server = std::make_unique<Session>(options(server_type));
    server->init_server("127.0.0.1", kDataPort, 0, 0, 0, dir);
    client = std::make_unique<Session>(options(client_type));
    ASSERT_EQ(client->connect(0, 1, "127.0.0.1", kDataPort, server->ctrl_port()), 0u);
    server->wait_peer(1, 10s);
  }

  std::string dir;
  std::unique_ptr<Session> server, client;
};

TEST_P(RealDeviceStagingTest, PutAndGetBetweenDeviceBuffers) {
  for (const char* tls : {"shm", "tcp"}) {
    SCOPED_TRACE(tls);
    connect(tls, GetParam(), GetParam());
    const auto native = client->native_memory_types();
    const bool staged = std::find(native.begin(), native.end(), GetParam()) == native.end();
    EXPECT_EQ(client->buffer_staged(), staged);
    for (std::size_t n : {std::size_t{1}, std::size_t{(256u << 10) + 1}, std::size_t{8u << 20}}) {
      fill(client->buffer(), 3, n, n);
      client->put(0, 3, 1001, n);
      EXPECT_TRUE(holds(server->buffer(), 1001, n, n));
      fill(server->buffer(), 7, n, n + 1);
      client->get(0, 5, 7, n);
      EXPECT_TRUE(holds(client->buffer(), 5, n, n + 1));
    }
    client.reset();
    server.reset();
  }
}

TEST_P(RealDeviceStagingTest, RegisteredDeviceMemoryOnAHostSession) {
  connect("tcp", MemoryType::CPU, MemoryType::CPU);
  auto device = Memory::create(GetParam(), 0);
  const std::size_t n = (3u << 20) + 77;
  void* mem = device->allocate(n);
  {
    RegisteredMemory reg = client->register_memory(mem, n, GetParam());
    const auto p = test::pattern(n, 9);
    device->copy_host_to_device(mem, p.data(), n);
    client->async_put_from(reg, 0, 0, 0, n, runtime::asio::use_future).get();
    EXPECT_TRUE(holds(server->buffer(), 0, n, 9));
    fill(server->buffer(), 4096, n, 10);
    client->async_get_into(reg, 0, 0, 4096, n, runtime::asio::use_future).get();
    std::vector<std::byte> got(n);
    device->copy_device_to_host(got.data(), mem, n);
    EXPECT_EQ(got, test::pattern(n, 10));
  }
  device->free(mem, n);
}

INSTANTIATE_TEST_SUITE_P(Device, RealDeviceStagingTest, ::testing::Values(MemoryType::NVIDIA_GPU, MemoryType::AMD_GPU),
                         [](const auto& p) { return std::string(to_string(p.param)); });

}  // namespace
}  // namespace hmc
