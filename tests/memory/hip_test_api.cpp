// HipApi: the HIP runtime queried directly, to check what HMC's HIP backend did.
#include <hip/hip_runtime_api.h>

#include <gtest/gtest.h>

#include "gpu_test_api.hpp"

namespace hmc::test {

int HipApi::device_count() {
  int n = 0;
  return hipGetDeviceCount(&n) == hipSuccess ? n : 0;
}

int HipApi::device_of(const void* p) {
  hipPointerAttribute_t a{};
  const hipError_t e = hipPointerGetAttributes(&a, p);
  EXPECT_EQ(e, hipSuccess) << hipGetErrorString(e);
  EXPECT_EQ(a.memoryType, hipMemoryTypeDevice);
  return e == hipSuccess && a.memoryType == hipMemoryTypeDevice ? a.device : -1;
}

int HipApi::current_device() {
  int d = -1;
  EXPECT_EQ(hipGetDevice(&d), hipSuccess);
  return d;
}

void HipApi::set_current_device(int device) { EXPECT_EQ(hipSetDevice(device), hipSuccess); }

}  // namespace hmc::test
