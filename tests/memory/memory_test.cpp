// Memory backends against real memory: CPU always, CUDA and HIP where a device is present.
#include "hmc/memory.hpp"

#include <algorithm>
#include <cstddef>
#include <iostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_test_api.hpp"
#include "hmc/error.hpp"
#include "test_bytes.hpp"

namespace hmc {
namespace {

using test::pattern;
using test::same_bytes;

TEST(MemoryType, ToStringNamesEveryType) {
  EXPECT_EQ(to_string(MemoryType::DEFAULT), "default");
  EXPECT_EQ(to_string(MemoryType::CPU), "cpu");
  EXPECT_EQ(to_string(MemoryType::NVIDIA_GPU), "nvidia_gpu");
  EXPECT_EQ(to_string(MemoryType::AMD_GPU), "amd_gpu");
  EXPECT_EQ(to_string(MemoryType::CAMBRICON_MLU), "cambricon_mlu");
  EXPECT_EQ(to_string(MemoryType::HUAWEI_ASCEND_NPU), "huawei_ascend_npu");
  EXPECT_EQ(to_string(MemoryType::MOORE_GPU), "moore_gpu");
  EXPECT_EQ(to_string(static_cast<MemoryType>(42)), "unknown");
}

TEST(CpuMemory, AllocateCopyRoundTripFree) {
  auto m = Memory::create(MemoryType::CPU);
  ASSERT_EQ(m->type(), MemoryType::CPU);
  EXPECT_EQ(m->device_id(), 0);
  constexpr std::size_t n = (1u << 20) + 3;
  const auto in = pattern(n, 7);
  void* a = m->allocate(n);
  void* b = m->allocate(n);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  m->copy_host_to_device(a, in.data(), n);
  m->copy_device_to_device(b, a, n);
  std::vector<std::byte> out(n);
  m->copy_device_to_host(out.data(), b, n);
  EXPECT_TRUE(same_bytes(out, in));
  m->free(a, n);
  m->free(b, n);
}

TEST(CpuMemory, DeviceToDeviceAllowsOverlap) {
  auto m = Memory::create(MemoryType::CPU);
  constexpr std::size_t n = 4096;
  auto* p = static_cast<std::byte*>(m->allocate(n));
  const auto in = pattern(n, 1);
  m->copy_host_to_device(p, in.data(), n);
  m->copy_device_to_device(p + 100, p, n - 100);
  std::vector<std::byte> expected = in;
  std::copy(in.begin(), in.end() - 100, expected.begin() + 100);
  std::vector<std::byte> out(n);
  m->copy_device_to_host(out.data(), p, n);
  EXPECT_TRUE(same_bytes(out, expected));
  m->free(p, n);
}

TEST(CpuMemory, DefaultMeansCpu) {
  auto m = Memory::create(MemoryType::DEFAULT);
  EXPECT_EQ(m->type(), MemoryType::CPU);
  EXPECT_TRUE(Memory::available(MemoryType::DEFAULT));
  EXPECT_TRUE(Memory::available(MemoryType::CPU));
}

TEST(CpuMemory, ZeroSizeAllocationRejected) {
  auto m = Memory::create(MemoryType::CPU);
  EXPECT_THROW(m->allocate(0), InvalidArgumentError);
}

TEST(CpuMemory, NullPointerWithBytesRejected) {
  auto m = Memory::create(MemoryType::CPU);
  std::byte b{};
  EXPECT_THROW(m->copy_host_to_device(nullptr, &b, 1), InvalidArgumentError);
  EXPECT_THROW(m->copy_device_to_host(&b, nullptr, 1), InvalidArgumentError);
  EXPECT_NO_THROW(m->copy_device_to_device(nullptr, nullptr, 0));
}

TEST(CpuMemory, NegativeDeviceIdRejected) {
  EXPECT_THROW(Memory::create(MemoryType::CPU, -1), InvalidArgumentError);
  EXPECT_THROW(Memory::create(MemoryType::DEFAULT, -1), InvalidArgumentError);
  std::string why;
  EXPECT_FALSE(Memory::available(MemoryType::CPU, -1, &why));
  EXPECT_NE(why.find("-1"), std::string::npos) << why;
}

TEST(Memory, VendorsWithoutBackendAreUnsupported) {
  for (MemoryType t : {MemoryType::CAMBRICON_MLU, MemoryType::HUAWEI_ASCEND_NPU, MemoryType::MOORE_GPU}) {
    SCOPED_TRACE(std::string(to_string(t)));
    try {
      Memory::create(t, 0);
      ADD_FAILURE() << "create() succeeded";
    } catch (const UnsupportedError& e) {
      EXPECT_EQ(e.status(), Status::UNSUPPORT);
      EXPECT_NE(std::string(e.what()).find("unsupported in this build"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(to_string(t)), std::string::npos) << e.what();
    }
    std::string why;
    EXPECT_FALSE(Memory::available(t, 0, &why));
    EXPECT_NE(why.find("unsupported in this build"), std::string::npos) << why;
  }
}

TEST(Memory, UnknownTypeRejected) {
  EXPECT_THROW(Memory::create(static_cast<MemoryType>(42)), InvalidArgumentError);
  EXPECT_FALSE(Memory::available(static_cast<MemoryType>(42)));
}

#if !defined(HMC_HAVE_CUDA) || !defined(HMC_HAVE_HIP)
// A backend this build lacks reports it as unsupported, naming what to install.
void expect_not_built(MemoryType t, const std::string& hint) {
  try {
    Memory::create(t, 0);
    ADD_FAILURE() << "create() succeeded";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported in this build"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(hint), std::string::npos) << e.what();
  }
  std::string why;
  EXPECT_FALSE(Memory::available(t, 0, &why));
  EXPECT_NE(why.find("unsupported in this build"), std::string::npos) << why;
}

#endif

#ifndef HMC_HAVE_CUDA
TEST(CudaMemory, NotBuiltIsUnsupported) { expect_not_built(MemoryType::NVIDIA_GPU, "CUDA toolkit"); }
#endif
#ifndef HMC_HAVE_HIP
TEST(HipMemory, NotBuiltIsUnsupported) { expect_not_built(MemoryType::AMD_GPU, "libamdhip64-dev"); }
#endif

#if defined(HMC_HAVE_CUDA) || defined(HMC_HAVE_HIP)
// Runs on a machine without the device too: available() and create() agree on the reason.
template <class Api>
void unavailable_reason() {
  std::string why;
  if (Memory::available(Api::type, 0, &why)) GTEST_SKIP() << "a device is present; nothing to explain";
  EXPECT_FALSE(why.empty());
  try {
    Memory::create(Api::type, 0);
    ADD_FAILURE() << "create() succeeded although available() said: " << why;
  } catch (const Error& e) {
    EXPECT_EQ(why, e.what());
  }
  std::cout << "[          ] " << Api::name << " unavailable: " << why << '\n';
}

template <class Api>
void negative_device_id_rejected() {
  EXPECT_THROW(Memory::create(Api::type, -1), InvalidArgumentError);
}

template <class Api>
void device_id_past_count_rejected() {
  std::string why;
  if (!Memory::available(Api::type, 0, &why)) GTEST_SKIP() << why;
  const int count = Api::device_count();
  EXPECT_THROW(Memory::create(Api::type, count), InvalidArgumentError);
  EXPECT_FALSE(Memory::available(Api::type, count, &why));
}

template <class Api>
void allocates_on_requested_device() {
  std::string why;
  if (!Memory::available(Api::type, 0, &why)) GTEST_SKIP() << why;
  const int count = Api::device_count();
  for (int id = count - 1; id >= 0; --id) {
    SCOPED_TRACE("device " + std::to_string(id));
    Api::set_current_device(0);
    auto m = Memory::create(Api::type, id);
    EXPECT_EQ(m->device_id(), id);
    void* p = m->allocate(1 << 20);
    EXPECT_EQ(Api::device_of(p), id);
    EXPECT_EQ(Api::current_device(), 0) << "allocate() changed the caller's current device";
    m->free(p, 1 << 20);
  }
}

template <class Api>
void zero_size_allocation_rejected() {
  std::string why;
  if (!Memory::available(Api::type, 0, &why)) GTEST_SKIP() << why;
  EXPECT_THROW(Memory::create(Api::type, 0)->allocate(0), InvalidArgumentError);
}

template <class Api>
void copies_round_trip() {
  std::string why;
  if (!Memory::available(Api::type, 0, &why)) GTEST_SKIP() << why;
  const int id = Api::device_count() - 1;
  auto m = Memory::create(Api::type, id);
  constexpr std::size_t n = (8u << 20) + 5;
  const auto in = pattern(n, 3);
  void* a = m->allocate(n);
  void* b = m->allocate(n);
  m->copy_host_to_device(a, in.data(), n);
  m->copy_device_to_device(b, a, n);
  std::vector<std::byte> out(n);
  m->copy_device_to_host(out.data(), b, n);
  EXPECT_TRUE(same_bytes(out, in));
  m->free(a, n);
  m->free(b, n);
}
#endif

#ifdef HMC_HAVE_CUDA
TEST(CudaMemory, UnavailableGivesTheSameReasonAsCreate) { unavailable_reason<test::CudaApi>(); }
TEST(CudaMemory, NegativeDeviceIdRejected) { negative_device_id_rejected<test::CudaApi>(); }
TEST(CudaMemory, DeviceIdPastCountRejected) { device_id_past_count_rejected<test::CudaApi>(); }
TEST(CudaMemory, AllocatesOnRequestedDeviceAndKeepsCurrent) { allocates_on_requested_device<test::CudaApi>(); }
TEST(CudaMemory, ZeroSizeAllocationRejected) { zero_size_allocation_rejected<test::CudaApi>(); }
TEST(CudaMemory, CopiesRoundTrip) { copies_round_trip<test::CudaApi>(); }
#endif
#ifdef HMC_HAVE_HIP
TEST(HipMemory, UnavailableGivesTheSameReasonAsCreate) { unavailable_reason<test::HipApi>(); }
TEST(HipMemory, NegativeDeviceIdRejected) { negative_device_id_rejected<test::HipApi>(); }
TEST(HipMemory, DeviceIdPastCountRejected) { device_id_past_count_rejected<test::HipApi>(); }
TEST(HipMemory, AllocatesOnRequestedDeviceAndKeepsCurrent) { allocates_on_requested_device<test::HipApi>(); }
TEST(HipMemory, ZeroSizeAllocationRejected) { zero_size_allocation_rejected<test::HipApi>(); }
TEST(HipMemory, CopiesRoundTrip) { copies_round_trip<test::HipApi>(); }
#endif

}  // namespace
}  // namespace hmc
