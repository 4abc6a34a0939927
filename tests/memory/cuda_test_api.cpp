// CudaApi: the CUDA runtime queried directly, to check what HMC's CUDA backend did.
#include <cuda_runtime_api.h>

#include <gtest/gtest.h>

#include "gpu_test_api.hpp"

namespace hmc::test {

int CudaApi::device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

int CudaApi::device_of(const void* p) {
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, p);
  EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  EXPECT_EQ(a.type, cudaMemoryTypeDevice);
  return e == cudaSuccess && a.type == cudaMemoryTypeDevice ? a.device : -1;
}

int CudaApi::current_device() {
  int d = -1;
  EXPECT_EQ(cudaGetDevice(&d), cudaSuccess);
  return d;
}

void CudaApi::set_current_device(int device) { EXPECT_EQ(cudaSetDevice(device), cudaSuccess); }

}  // namespace hmc::test
