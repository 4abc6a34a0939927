#include "memory/hip_api.hpp"

#include "memory/runtime_library.hpp"

namespace hmc::detail {

const HipApi& hip_api() {
  static const HipApi api = [] {
    constexpr const char* what = "the ROCm HIP runtime (" HMC_HIP_RUNTIME_SONAME ")";
    void* lib = open_runtime_library(what, HMC_HIP_RUNTIME_SONAME, HMC_HIP_RUNTIME_PATH);
    HipApi a{};
#define HMC_LOAD(fn) load_symbol(a.fn, lib, what, #fn)
    HMC_LOAD(hipGetErrorString);
    HMC_LOAD(hipGetErrorName);
    HMC_LOAD(hipGetLastError);
    HMC_LOAD(hipGetDeviceCount);
    HMC_LOAD(hipGetDevice);
    HMC_LOAD(hipSetDevice);
    HMC_LOAD(hipMalloc);
    HMC_LOAD(hipFree);
    HMC_LOAD(hipHostMalloc);
    HMC_LOAD(hipHostFree);
    HMC_LOAD(hipMemcpy);
    HMC_LOAD(hipMemcpyAsync);
    HMC_LOAD(hipStreamCreateWithFlags);
    HMC_LOAD(hipStreamDestroy);
    HMC_LOAD(hipStreamSynchronize);
    HMC_LOAD(hipStreamAddCallback);
#undef HMC_LOAD
    return a;
  }();
  return api;
}

}  // namespace hmc::detail
