#pragma once
// The ROCm HIP runtime as GpuApi's traits: libamdhip64's types, constants and entry-point names.
#include <hip/hip_runtime_api.h>

#include "hmc/memory_type.hpp"
#include "memory/gpu_runtime.hpp"

namespace hmc::detail {

struct HipRuntime {
  using Error = hipError_t;
  using Stream = hipStream_t;
  using MemcpyKind = hipMemcpyKind;
  using StreamCallback = hipStreamCallback_t;

  static constexpr MemoryType memory_type = MemoryType::AMD_GPU;
  static constexpr const char* name = "HIP";
  static constexpr const char* lower_name = "hip";
  static constexpr Error success = hipSuccess;
  static constexpr MemcpyKind host_to_device = hipMemcpyHostToDevice;
  static constexpr MemcpyKind device_to_host = hipMemcpyDeviceToHost;
  static constexpr MemcpyKind device_to_device = hipMemcpyDeviceToDevice;
  static constexpr unsigned int stream_non_blocking = hipStreamNonBlocking;
  static constexpr unsigned int host_alloc_portable = hipHostMallocPortable;

  static constexpr GpuSymbols symbols{
      .get_error_string = "hipGetErrorString",
      .get_error_name = "hipGetErrorName",
      .get_last_error = "hipGetLastError",
      .get_device_count = "hipGetDeviceCount",
      .get_device = "hipGetDevice",
      .set_device = "hipSetDevice",
      .malloc = "hipMalloc",
      .free = "hipFree",
      .host_alloc = "hipHostMalloc",
      .free_host = "hipHostFree",
      .memcpy = "hipMemcpy",
      .memcpy_async = "hipMemcpyAsync",
      .stream_create_with_flags = "hipStreamCreateWithFlags",
      .stream_destroy = "hipStreamDestroy",
      .stream_synchronize = "hipStreamSynchronize",
      .stream_add_callback = "hipStreamAddCallback",
  };
};

template <>
const GpuApi<HipRuntime>& gpu_api<HipRuntime>();

}  // namespace hmc::detail
