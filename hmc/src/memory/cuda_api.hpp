#pragma once
// The CUDA runtime calls HMC makes, resolved from libcudart at run time (memory/runtime_library.hpp).
#include <cuda_runtime_api.h>

namespace hmc::detail {

struct CudaApi {
  decltype(&::cudaGetErrorString) cudaGetErrorString;
  decltype(&::cudaGetErrorName) cudaGetErrorName;
  decltype(&::cudaGetLastError) cudaGetLastError;
  decltype(&::cudaGetDeviceCount) cudaGetDeviceCount;
  decltype(&::cudaGetDevice) cudaGetDevice;
  decltype(&::cudaSetDevice) cudaSetDevice;
  decltype(&::cudaMalloc) cudaMalloc;
  decltype(&::cudaFree) cudaFree;
  decltype(&::cudaHostAlloc) cudaHostAlloc;
  decltype(&::cudaFreeHost) cudaFreeHost;
  decltype(&::cudaMemcpy) cudaMemcpy;
  decltype(&::cudaMemcpyAsync) cudaMemcpyAsync;
  decltype(&::cudaStreamCreateWithFlags) cudaStreamCreateWithFlags;
  decltype(&::cudaStreamDestroy) cudaStreamDestroy;
  decltype(&::cudaStreamSynchronize) cudaStreamSynchronize;
  decltype(&::cudaStreamAddCallback) cudaStreamAddCallback;
};

// Loaded once per process; throws UnsupportedError (and retries on the next call) when it cannot be.
const CudaApi& cuda_api();

}  // namespace hmc::detail
