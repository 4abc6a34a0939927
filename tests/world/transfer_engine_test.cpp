// TransferEngine: engines joining through the embedded store write to and read from each other's
// registered memory by address, in batches, and refuse addresses nobody registered.
#include <gtest/gtest.h>

#include <numeric>

#include "hmc/error.hpp"
#include "hmc/store/store_server.hpp"
#include "hmc/world/transfer_engine.hpp"

namespace hmc {
namespace {

using namespace std::chrono_literals;

class TransferEngineTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    StoreServerOptions so;
    so.auth_key = "transfer-engine-test-key";
    server = std::make_unique<StoreServer>(so);
    url = "tcp://127.0.0.1:" + std::to_string(server->listen("127.0.0.1", 0));
  }
  TransferEngineOptions options() {
    TransferEngineOptions o;
    o.session.buffer_size = 256u << 10;  // small staging: large transfers go in many pieces
    o.session.ucx_tls = GetParam();
    o.session.ucx_net_devices = "lo";
    o.store.auth_key = "transfer-engine-test-key";
    o.store.job_id = "te";
    o.timeout = 10s;
    return o;
  }
  std::unique_ptr<StoreServer> server;
  std::string url;
};

std::vector<std::uint8_t> bytes(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(i * 31 + seed + i / 251);
  return v;
}

TEST_P(TransferEngineTest, WritesAndReadsReachRegisteredMemoryByAddress) {
  TransferEngine a(url, "10.0.0.1:100", options());
  TransferEngine b(url, "10.0.0.2:100", options());
  std::vector<std::uint8_t> target(3u << 20, 0);  // larger than b's staging: many pieces
  a.register_memory(target.data(), target.size());
  const auto base = reinterpret_cast<std::uint64_t>(target.data());

  const auto src = bytes(1'000'003, 7);
  b.write("10.0.0.1:100", src.data(), base + 12345, src.size());
  EXPECT_TRUE(std::equal(src.begin(), src.end(), target.begin() + 12345));

  std::vector<std::uint8_t> back(src.size());
  b.read("10.0.0.1:100", back.data(), base + 12345, back.size());
  EXPECT_EQ(back, src);

  // A batch of odd pieces, and the awaitable form.
  const auto p1 = bytes(17, 1), p2 = bytes(70001, 2);
  b.write_batch("10.0.0.1:100", {TransferPiece{const_cast<std::uint8_t*>(p1.data()), base, p1.size()},
                                 TransferPiece{const_cast<std::uint8_t*>(p2.data()), base + 2'000'000, p2.size()}});
  EXPECT_TRUE(std::equal(p1.begin(), p1.end(), target.begin()));
  EXPECT_TRUE(std::equal(p2.begin(), p2.end(), target.begin() + 2'000'000));
  auto f = b.async_write("10.0.0.1:100", p1.data(), base + 100, p1.size(), runtime::asio::use_future);
  f.get();
  EXPECT_TRUE(std::equal(p1.begin(), p1.end(), target.begin() + 100));

  // And the other way round (the lower engine initiates: it rings the higher one's doorbell).
  std::vector<std::uint8_t> other(4096, 0);
  b.register_memory(other.data(), other.size());
  a.write("10.0.0.2:100", p1.data(), reinterpret_cast<std::uint64_t>(other.data()) + 5, p1.size());
  EXPECT_TRUE(std::equal(p1.begin(), p1.end(), other.begin() + 5));
}

TEST_P(TransferEngineTest, AddressesOutsideRegisteredMemoryAndUnknownPeersAreRefused) {
  TransferEngine a(url, "a", options());
  TransferEngine b(url, "b", options());
  std::vector<std::uint8_t> target(4096, 0);
  a.register_memory(target.data(), target.size());
  const auto base = reinterpret_cast<std::uint64_t>(target.data());
  const auto src = bytes(100, 3);
  EXPECT_THROW(b.write("a", src.data(), base + 4000, src.size()), OutOfRangeError);  // runs past the end
  EXPECT_THROW(b.write("a", src.data(), base - 50, src.size()), OutOfRangeError);    // starts before it
  EXPECT_TRUE(std::all_of(target.begin(), target.end(), [](std::uint8_t x) { return x == 0; }));
  a.unregister_memory(target.data());
  EXPECT_THROW(b.write("a", src.data(), base, src.size()), OutOfRangeError);
  EXPECT_THROW(a.unregister_memory(target.data()), NotFoundError);
  auto o = options();
  o.timeout = 500ms;
  TransferEngine c(url, "c", o);
  EXPECT_THROW(c.write("nobody", src.data(), base, src.size()), NotFoundError);
  EXPECT_THROW(TransferEngine(url, "a", options()), InvalidConfigError);  // the id is taken
}

INSTANTIATE_TEST_SUITE_P(World, TransferEngineTest, ::testing::Values("shm", "tcp"));

}  // namespace
}  // namespace hmc
