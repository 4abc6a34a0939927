#include "memory/hip_api.hpp"

#include <type_traits>

namespace hmc::detail {

// GpuApi's signatures are written over the traits' types: each must be the runtime's own
// (hipMalloc and hipHostMalloc have template overloads in the header, so they are spelled out there).
#define HMC_SAME_AS(member, fn) \
  static_assert(std::is_same_v<decltype(GpuApi<HipRuntime>::member), decltype(&::fn)>, #fn)
HMC_SAME_AS(get_error_string, hipGetErrorString);
HMC_SAME_AS(get_error_name, hipGetErrorName);
HMC_SAME_AS(get_last_error, hipGetLastError);
HMC_SAME_AS(get_device_count, hipGetDeviceCount);
HMC_SAME_AS(get_device, hipGetDevice);
HMC_SAME_AS(set_device, hipSetDevice);
HMC_SAME_AS(free, hipFree);
HMC_SAME_AS(free_host, hipHostFree);
HMC_SAME_AS(memcpy, hipMemcpy);
HMC_SAME_AS(memcpy_async, hipMemcpyAsync);
HMC_SAME_AS(stream_create_with_flags, hipStreamCreateWithFlags);
HMC_SAME_AS(stream_destroy, hipStreamDestroy);
HMC_SAME_AS(stream_synchronize, hipStreamSynchronize);
HMC_SAME_AS(stream_add_callback, hipStreamAddCallback);
#undef HMC_SAME_AS

template <>
const GpuApi<HipRuntime>& gpu_api<HipRuntime>() {
  static const GpuApi<HipRuntime> api = load_gpu_api<HipRuntime>("the ROCm HIP runtime (" HMC_HIP_RUNTIME_SONAME ")",
                                                                 HMC_HIP_RUNTIME_SONAME, HMC_HIP_RUNTIME_PATH);
  return api;
}

}  // namespace hmc::detail
