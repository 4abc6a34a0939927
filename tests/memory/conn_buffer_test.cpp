// ConnBuffer on real memory: bounds, overlap, 64-bit offsets; GPU buffers where a device is present.
#include "hmc/conn_buffer.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_test_api.hpp"
#include "hmc/error.hpp"
#include "test_bytes.hpp"

namespace hmc {
namespace {

using test::pattern;
using test::same_bytes;

constexpr std::byte fill{0xAB};

std::shared_ptr<Memory> cpu() { return Memory::create(MemoryType::CPU); }

// The whole buffer read back through the public API.
std::vector<std::byte> contents(const ConnBuffer& b) {
  std::vector<std::byte> out(b.size());
  b.read_to_cpu(out.data(), out.size());
  return out;
}

void fill_buffer(ConnBuffer& b) {
  const std::vector<std::byte> v(b.size(), fill);
  b.write_from_cpu(v.data(), v.size());
}

TEST(ConnBuffer, Accessors) {
  auto m = Memory::create(MemoryType::DEFAULT);
  ConnBuffer b(std::move(m), 4096);
  EXPECT_NE(b.data(), nullptr);
  EXPECT_EQ(b.size(), 4096u);
  EXPECT_EQ(b.type(), MemoryType::CPU);
  EXPECT_EQ(b.device_id(), 0);
  EXPECT_EQ(b.memory().type(), MemoryType::CPU);
}

TEST(ConnBuffer, ZeroSizeAndNullMemoryRejected) {
  EXPECT_THROW(ConnBuffer(cpu(), 0), InvalidArgumentError);
  EXPECT_THROW(ConnBuffer(nullptr, 16), InvalidArgumentError);
}

TEST(ConnBuffer, WriteReadRoundTripAtSeveralOffsets) {
  constexpr std::size_t size = 64 * 1024;
  ConnBuffer b(cpu(), size);
  fill_buffer(b);
  std::vector<std::byte> expected(size, fill);
  const std::pair<std::size_t, std::size_t> cases[] = {
      {0, 1}, {1, 4095}, {4096, 4096}, {10000, 333}, {size - 100, 100}, {size - 1, 1}, {0, size}};
  unsigned seed = 0;
  for (auto [offset, n] : cases) {
    SCOPED_TRACE("offset " + std::to_string(offset) + " n " + std::to_string(n));
    const auto in = pattern(n, ++seed);
    b.write_from_cpu(in.data(), n, offset);
    std::copy(in.begin(), in.end(), expected.begin() + static_cast<std::ptrdiff_t>(offset));
    std::vector<std::byte> out(n);
    b.read_to_cpu(out.data(), n, offset);
    EXPECT_TRUE(same_bytes(out, in));
    EXPECT_EQ(std::memcmp(static_cast<const std::byte*>(b.data()) + offset, in.data(), n), 0);
    EXPECT_TRUE(same_bytes(contents(b), expected)) << "bytes outside the range changed";
  }
}

TEST(ConnBuffer, OutOfRangeWritesThrowAndWriteNothing) {
  constexpr std::size_t size = 4096;
  constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
  ConnBuffer b(cpu(), size);
  fill_buffer(b);
  const std::vector<std::byte> src(8192, std::byte{0x11});
  const std::pair<std::size_t, std::size_t> cases[] = {
      {size + 1, 0},    // offset past the end
      {size, 1},        // starts at the end
      {size - 10, 11},  // offset + n past the end
      {0, size + 1},    // longer than the buffer
      {1, max},         // offset + n wraps to 0
      {max, 1},         // offset + n wraps to 0
      {size - 1, max},  // wraps to size - 2, which would pass a naive check
      {max - 5, 10},    // wraps to 4
  };
  for (auto [offset, n] : cases) {
    SCOPED_TRACE("offset " + std::to_string(offset) + " n " + std::to_string(n));
    try {
      b.write_from_cpu(src.data(), n, offset);
      ADD_FAILURE() << "write_from_cpu did not throw";
    } catch (const OutOfRangeError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(std::to_string(offset)), std::string::npos) << what;
      EXPECT_NE(what.find(std::to_string(n)), std::string::npos) << what;
      EXPECT_NE(what.find(std::to_string(size)), std::string::npos) << what;
      EXPECT_EQ(e.status(), Status::OUT_OF_RANGE);
    }
    EXPECT_THROW(b.check_range(offset, n), OutOfRangeError);
    EXPECT_TRUE(same_bytes(contents(b), std::vector<std::byte>(size, fill))) << "a rejected write wrote";
  }
}

TEST(ConnBuffer, OutOfRangeReadsThrowAndReadNothing) {
  ConnBuffer b(cpu(), 4096);
  fill_buffer(b);
  std::vector<std::byte> dst(64, std::byte{0});
  EXPECT_THROW(b.read_to_cpu(dst.data(), 64, 4096 - 63), OutOfRangeError);
  EXPECT_THROW(b.read_to_cpu(dst.data(), 1, std::numeric_limits<std::size_t>::max()), OutOfRangeError);
  EXPECT_TRUE(same_bytes(dst, std::vector<std::byte>(64, std::byte{0})));
}

TEST(ConnBuffer, ZeroLengthIsANoOpInsideTheBuffer) {
  ConnBuffer b(cpu(), 128);
  fill_buffer(b);
  EXPECT_NO_THROW(b.check_range(128, 0));
  EXPECT_NO_THROW(b.write_from_cpu(nullptr, 0, 128));
  EXPECT_NO_THROW(b.read_to_cpu(nullptr, 0, 0));
  EXPECT_NO_THROW(b.copy_within(128, 0, 0));
  EXPECT_THROW(b.write_from_cpu(nullptr, 0, 129), OutOfRangeError);
  EXPECT_THROW(b.read_to_cpu(nullptr, 0, 129), OutOfRangeError);
  EXPECT_TRUE(same_bytes(contents(b), std::vector<std::byte>(128, fill)));
}

TEST(ConnBuffer, NullPointerWithBytesRejected) {
  ConnBuffer b(cpu(), 128);
  EXPECT_THROW(b.write_from_cpu(nullptr, 1), InvalidArgumentError);
  EXPECT_THROW(b.read_to_cpu(nullptr, 1), InvalidArgumentError);
}

TEST(ConnBuffer, CopyWithinOverlappingBothDirections) {
  constexpr std::size_t size = 10000;
  const auto in = pattern(size, 9);
  struct Case {
    std::size_t dst, src, n;
  };
  for (Case c : {Case{100, 0, 5000}, Case{0, 100, 5000}, Case{1, 0, size - 1}, Case{0, 1, size - 1},
                 Case{5000, 0, 5000}, Case{3, 3, 100}}) {
    SCOPED_TRACE("dst " + std::to_string(c.dst) + " src " + std::to_string(c.src) + " n " + std::to_string(c.n));
    ConnBuffer b(cpu(), size);
    b.write_from_cpu(in.data(), size);
    b.copy_within(c.dst, c.src, c.n);
    std::vector<std::byte> expected = in;
    std::memmove(expected.data() + c.dst, expected.data() + c.src, c.n);
    EXPECT_TRUE(same_bytes(contents(b), expected));
  }
}

TEST(ConnBuffer, CopyWithinChecksBothRanges) {
  ConnBuffer b(cpu(), 1000);
  fill_buffer(b);
  EXPECT_THROW(b.copy_within(901, 0, 100), OutOfRangeError);
  EXPECT_THROW(b.copy_within(0, 901, 100), OutOfRangeError);
  EXPECT_THROW(b.copy_within(0, 1, std::numeric_limits<std::size_t>::max()), OutOfRangeError);
  EXPECT_TRUE(same_bytes(contents(b), std::vector<std::byte>(1000, fill)));
}

TEST(ConnBuffer, GpuCopiesOnCpuBufferNeedAGpuBackend) {
  ConnBuffer b(cpu(), 128);
  fill_buffer(b);
  std::vector<std::byte> host(16, std::byte{1});
  EXPECT_THROW(b.write_from_gpu(host.data(), 16, 0, nullptr), InvalidArgumentError);
  EXPECT_THROW(b.read_to_gpu(host.data(), 16, 0, nullptr), InvalidArgumentError);
  // A CPU backend is not a GPU: host memory goes through the _cpu variants.
  auto other = cpu();
  EXPECT_THROW(b.write_from_gpu(host.data(), 16, 0, other.get()), InvalidArgumentError);
  EXPECT_THROW(b.read_to_gpu(host.data(), 16, 0, other.get()), InvalidArgumentError);
  // The range is checked first, whatever the backend.
  EXPECT_THROW(b.write_from_gpu(host.data(), 16, 120, nullptr), OutOfRangeError);
  EXPECT_TRUE(same_bytes(contents(b), std::vector<std::byte>(128, fill)));
  EXPECT_TRUE(same_bytes(host, std::vector<std::byte>(16, std::byte{1})));
}

// 64-bit offsets and lengths end to end; mmap(MAP_NORESERVE) keeps the untouched pages free.
TEST(ConnBuffer, FiveGiBBufferWithOffsetPastFourGiB) {
  constexpr std::size_t size = std::size_t{5} << 30;
  constexpr std::size_t offset = (std::size_t{9} << 30) / 2;  // 4.5 GiB
  constexpr std::size_t n = std::size_t{1} << 20;
  ConnBuffer b(cpu(), size);
  const auto in = pattern(n, 5);
  b.write_from_cpu(in.data(), n, offset);
  std::vector<std::byte> out(n);
  b.read_to_cpu(out.data(), n, offset);
  EXPECT_TRUE(same_bytes(out, in));
  // The same bytes seen at a 32-bit-truncated offset would be elsewhere: that region is still zero.
  const std::size_t truncated = static_cast<std::uint32_t>(offset);
  b.read_to_cpu(out.data(), n, truncated);
  EXPECT_TRUE(same_bytes(out, std::vector<std::byte>(n, std::byte{0})));
  EXPECT_THROW(b.write_from_cpu(in.data(), n, size - n + 1), OutOfRangeError);
  b.copy_within(0, offset, n);
  b.read_to_cpu(out.data(), n, 0);
  EXPECT_TRUE(same_bytes(out, in));
}

#if defined(HMC_HAVE_CUDA) || defined(HMC_HAVE_HIP)
// Device memory outside any ConnBuffer, freed with its backend.
struct DeviceBlock {
  std::shared_ptr<Memory> m;
  std::size_t n;
  void* p;
  DeviceBlock(std::shared_ptr<Memory> memory, std::size_t size) : m(std::move(memory)), n(size), p(m->allocate(n)) {}
  ~DeviceBlock() { m->free(p, n); }
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;
  std::vector<std::byte> read() const {
    std::vector<std::byte> out(n);
    m->copy_device_to_host(out.data(), p, n);
    return out;
  }
};

template <class Api>
void allocated_on_requested_device() {
  std::string why;
  if (!Memory::available(Api::type, 0, &why)) GTEST_SKIP() << why;
  for (int id = 0; id < Api::device_count(); ++id) {
    ConnBuffer b(Memory::create(Api::type, id), 1 << 20);
    EXPECT_EQ(b.type(), Api::type);
    EXPECT_EQ(b.device_id(), id);
    EXPECT_EQ(Api::device_of(b.data()), id);
  }
}

template <class Api>
void host_round_trip_at_several_offsets() {
  std::string why;
  if (!Memory::available(Api::type, 0, &why)) GTEST_SKIP() << why;
  constexpr std::size_t size = 4 << 20;
  ConnBuffer b(Memory::create(Api::type, Api::device_count() - 1), size);
  fill_buffer(b);
  std::vector<std::byte> expected(size, fill);
  unsigned seed = 0;
  for (auto [offset, n] : {std::pair<std::size_t, std::size_t>{0, 1}, {4095, 70000}, {size - 1000, 1000}}) {
    const auto in = pattern(n, ++seed);
    b.write_from_cpu(in.data(), n, offset);
    std::copy(in.begin(), in.end(), expected.begin() + static_cast<std::ptrdiff_t>(offset));
    std::vector<std::byte> out(n);
    b.read_to_cpu(out.data(), n, offset);
    EXPECT_TRUE(same_bytes(out, in));
  }
  EXPECT_TRUE(same_bytes(contents(b), expected));
  EXPECT_THROW(b.write_from_cpu(expected.data(), 2, size - 1), OutOfRangeError);
}

template <class Api>
void device_to_device_round_trip() {
  std::string why;
  if (!Memory::available(Api::type, 0, &why)) GTEST_SKIP() << why;
  std::shared_ptr<Memory> m = Memory::create(Api::type, 0);
  constexpr std::size_t n = 1 << 20;
  ConnBuffer b(m, 2 * n);
  fill_buffer(b);
  DeviceBlock src(m, n), dst(m, n);
  const auto in = pattern(n, 4);
  m->copy_host_to_device(src.p, in.data(), n);
  b.write_from_gpu(src.p, n, n / 2);        // nullptr: the buffer's own backend
  b.read_to_gpu(dst.p, n, n / 2, m.get());  // or named explicitly
  EXPECT_TRUE(same_bytes(dst.read(), in));
  std::vector<std::byte> expected(2 * n, fill);
  std::copy(in.begin(), in.end(), expected.begin() + n / 2);
  EXPECT_TRUE(same_bytes(contents(b), expected));
  EXPECT_THROW(b.write_from_gpu(src.p, n, n + 1), OutOfRangeError);
  auto host = cpu();
  EXPECT_THROW(b.write_from_gpu(src.p, n, 0, host.get()), InvalidArgumentError);
}

template <class Api>
void cpu_buffer_exchanges_with_gpu_memory() {
  std::string why;
  if (!Memory::available(Api::type, 0, &why)) GTEST_SKIP() << why;
  std::shared_ptr<Memory> gpu = Memory::create(Api::type, Api::device_count() - 1);
  constexpr std::size_t n = (2 << 20) + 17;
  ConnBuffer b(cpu(), 3 * n);
  fill_buffer(b);
  DeviceBlock src(gpu, n), dst(gpu, n);
  const auto in = pattern(n, 6);
  gpu->copy_host_to_device(src.p, in.data(), n);
  b.write_from_gpu(src.p, n, n, gpu.get());
  std::vector<std::byte> out(n);
  b.read_to_cpu(out.data(), n, n);
  EXPECT_TRUE(same_bytes(out, in));
  b.read_to_gpu(dst.p, n, n, gpu.get());
  EXPECT_TRUE(same_bytes(dst.read(), in));
  EXPECT_THROW(b.write_from_gpu(src.p, n, 0, nullptr), InvalidArgumentError);
}

template <class Api>
void copy_within_overlapping_both_directions() {
  std::string why;
  if (!Memory::available(Api::type, 0, &why)) GTEST_SKIP() << why;
  // 40 MiB moved by 1 MiB and by 1 byte: overlapping, and larger than the 16 MiB staging chunk.
  constexpr std::size_t size = 41 << 20;
  const auto in = pattern(size, 8);
  for (auto [dst, src] : {std::pair<std::size_t, std::size_t>{1 << 20, 0}, {0, 1 << 20}, {1, 0}, {0, 1}}) {
    SCOPED_TRACE("dst " + std::to_string(dst) + " src " + std::to_string(src));
    ConnBuffer b(Memory::create(Api::type, 0), size);
    b.write_from_cpu(in.data(), size);
    const std::size_t n = 40 << 20;
    b.copy_within(dst, src, n);
    std::vector<std::byte> expected = in;
    std::memmove(expected.data() + dst, expected.data() + src, n);
    EXPECT_TRUE(same_bytes(contents(b), expected));
  }
}
#endif

#ifdef HMC_HAVE_CUDA
TEST(CudaConnBuffer, AllocatedOnRequestedDevice) { allocated_on_requested_device<test::CudaApi>(); }
TEST(CudaConnBuffer, HostRoundTripAtSeveralOffsets) { host_round_trip_at_several_offsets<test::CudaApi>(); }
TEST(CudaConnBuffer, DeviceToDeviceRoundTrip) { device_to_device_round_trip<test::CudaApi>(); }
TEST(CudaConnBuffer, CpuBufferExchangesWithGpuMemory) { cpu_buffer_exchanges_with_gpu_memory<test::CudaApi>(); }
TEST(CudaConnBuffer, CopyWithinOverlappingBothDirections) { copy_within_overlapping_both_directions<test::CudaApi>(); }
#endif
#ifdef HMC_HAVE_HIP
TEST(HipConnBuffer, AllocatedOnRequestedDevice) { allocated_on_requested_device<test::HipApi>(); }
TEST(HipConnBuffer, HostRoundTripAtSeveralOffsets) { host_round_trip_at_several_offsets<test::HipApi>(); }
TEST(HipConnBuffer, DeviceToDeviceRoundTrip) { device_to_device_round_trip<test::HipApi>(); }
TEST(HipConnBuffer, CpuBufferExchangesWithGpuMemory) { cpu_buffer_exchanges_with_gpu_memory<test::HipApi>(); }
TEST(HipConnBuffer, CopyWithinOverlappingBothDirections) { copy_within_overlapping_both_directions<test::HipApi>(); }
#endif

}  // namespace
}  // namespace hmc
