#pragma once
// The HIP runtime calls HMC makes, resolved from libamdhip64 at run time (memory/runtime_library.hpp).
#include <hip/hip_runtime_api.h>

namespace hmc::detail {

struct HipApi {
  decltype(&::hipGetErrorString) hipGetErrorString;
  decltype(&::hipGetErrorName) hipGetErrorName;
  decltype(&::hipGetLastError) hipGetLastError;
  decltype(&::hipGetDeviceCount) hipGetDeviceCount;
  decltype(&::hipGetDevice) hipGetDevice;
  decltype(&::hipSetDevice) hipSetDevice;
  hipError_t (*hipMalloc)(void**, size_t);  // spelled out: the header adds template overloads
  decltype(&::hipFree) hipFree;
  hipError_t (*hipHostMalloc)(void**, size_t, unsigned int);
  decltype(&::hipHostFree) hipHostFree;
  decltype(&::hipMemcpy) hipMemcpy;
  decltype(&::hipMemcpyAsync) hipMemcpyAsync;
  decltype(&::hipStreamCreateWithFlags) hipStreamCreateWithFlags;
  decltype(&::hipStreamDestroy) hipStreamDestroy;
  decltype(&::hipStreamSynchronize) hipStreamSynchronize;
  decltype(&::hipStreamAddCallback) hipStreamAddCallback;
};

// Loaded once per process; throws UnsupportedError (and retries on the next call) when it cannot be.
const HipApi& hip_api();

}  // namespace hmc::detail
