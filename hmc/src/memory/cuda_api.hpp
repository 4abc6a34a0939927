#pragma once
// The CUDA runtime as GpuApi's traits: libcudart's types, constants and entry-point names.
#include <cuda_runtime_api.h>

#include "hmc/memory_type.hpp"
#include "memory/gpu_runtime.hpp"

namespace hmc::detail {

struct CudaRuntime {
  using Error = cudaError_t;
  using Stream = cudaStream_t;
  using MemcpyKind = cudaMemcpyKind;
  using StreamCallback = cudaStreamCallback_t;

  static constexpr MemoryType memory_type = MemoryType::NVIDIA_GPU;
  static constexpr const char* name = "CUDA";        // "CUDA device 0"
  static constexpr const char* lower_name = "cuda";  // "cuda staging copy"
  static constexpr Error success = cudaSuccess;
  static constexpr MemcpyKind host_to_device = cudaMemcpyHostToDevice;
  static constexpr MemcpyKind device_to_host = cudaMemcpyDeviceToHost;
  static constexpr MemcpyKind device_to_device = cudaMemcpyDeviceToDevice;
  static constexpr unsigned int stream_non_blocking = cudaStreamNonBlocking;
  static constexpr unsigned int host_alloc_portable = cudaHostAllocPortable;

  static constexpr GpuSymbols symbols{
      .get_error_string = "cudaGetErrorString",
      .get_error_name = "cudaGetErrorName",
      .get_last_error = "cudaGetLastError",
      .get_device_count = "cudaGetDeviceCount",
      .get_device = "cudaGetDevice",
      .set_device = "cudaSetDevice",
      .malloc = "cudaMalloc",
      .free = "cudaFree",
      .host_alloc = "cudaHostAlloc",
      .free_host = "cudaFreeHost",
      .memcpy = "cudaMemcpy",
      .memcpy_async = "cudaMemcpyAsync",
      .stream_create_with_flags = "cudaStreamCreateWithFlags",
      .stream_destroy = "cudaStreamDestroy",
      .stream_synchronize = "cudaStreamSynchronize",
      .stream_add_callback = "cudaStreamAddCallback",
  };
};

template <>
const GpuApi<CudaRuntime>& gpu_api<CudaRuntime>();

}  // namespace hmc::detail
