#pragma once
// The vendor runtime calls the GPU tests use to check HMC's backends independently of them.
// Defined in cuda_test_api.cpp / hip_test_api.cpp: the CUDA and HIP headers cannot share a file.
#include <string>

#include "hmc/memory_type.hpp"

namespace hmc::test {

#ifdef HMC_HAVE_CUDA
struct CudaApi {
  static constexpr MemoryType type = MemoryType::NVIDIA_GPU;
  static constexpr const char* name = "cuda";
  static int device_count();
  // The device a pointer was allocated on; -1 (and a test failure) when it is not device memory.
  static int device_of(const void* p);
  static int current_device();
  static void set_current_device(int device);
};
#endif

#ifdef HMC_HAVE_HIP
struct HipApi {
  static constexpr MemoryType type = MemoryType::AMD_GPU;
  static constexpr const char* name = "hip";
  static int device_count();
  static int device_of(const void* p);
  static int current_device();
  static void set_current_device(int device);
};
#endif

}  // namespace hmc::test
