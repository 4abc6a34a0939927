#include "memory/cuda_api.hpp"

#include "memory/runtime_library.hpp"

namespace hmc::detail {

const CudaApi& cuda_api() {
  static const CudaApi api = [] {
    constexpr const char* what = "the CUDA runtime (" HMC_CUDART_SONAME ")";
    void* lib = open_runtime_library(what, HMC_CUDART_SONAME, HMC_CUDART_PATH);
    CudaApi a{};
#define HMC_LOAD(fn) load_symbol(a.fn, lib, what, #fn)
    HMC_LOAD(cudaGetErrorString);
    HMC_LOAD(cudaGetErrorName);
    HMC_LOAD(cudaGetLastError);
    HMC_LOAD(cudaGetDeviceCount);
    HMC_LOAD(cudaGetDevice);
    HMC_LOAD(cudaSetDevice);
    HMC_LOAD(cudaMalloc);
    HMC_LOAD(cudaFree);
    HMC_LOAD(cudaHostAlloc);
    HMC_LOAD(cudaFreeHost);
    HMC_LOAD(cudaMemcpy);
    HMC_LOAD(cudaMemcpyAsync);
    HMC_LOAD(cudaStreamCreateWithFlags);
    HMC_LOAD(cudaStreamDestroy);
    HMC_LOAD(cudaStreamSynchronize);
    HMC_LOAD(cudaStreamAddCallback);
#undef HMC_LOAD
    return a;
  }();
  return api;
}

}  // namespace hmc::detail
