#include "memory/cuda_api.hpp"

#include <type_traits>

namespace hmc::detail {

// GpuApi's signatures are written over the traits' types: each must be the runtime's own.
#define HMC_SAME_AS(member, fn) \
  static_assert(std::is_same_v<decltype(GpuApi<CudaRuntime>::member), decltype(&::fn)>, #fn)
HMC_SAME_AS(get_error_string, cudaGetErrorString);
HMC_SAME_AS(get_error_name, cudaGetErrorName);
HMC_SAME_AS(get_last_error, cudaGetLastError);
HMC_SAME_AS(get_device_count, cudaGetDeviceCount);
HMC_SAME_AS(get_device, cudaGetDevice);
HMC_SAME_AS(set_device, cudaSetDevice);
HMC_SAME_AS(malloc, cudaMalloc);
HMC_SAME_AS(free, cudaFree);
HMC_SAME_AS(host_alloc, cudaHostAlloc);
HMC_SAME_AS(free_host, cudaFreeHost);
HMC_SAME_AS(memcpy, cudaMemcpy);
HMC_SAME_AS(memcpy_async, cudaMemcpyAsync);
HMC_SAME_AS(stream_create_with_flags, cudaStreamCreateWithFlags);
HMC_SAME_AS(stream_destroy, cudaStreamDestroy);
HMC_SAME_AS(stream_synchronize, cudaStreamSynchronize);
HMC_SAME_AS(stream_add_callback, cudaStreamAddCallback);
#undef HMC_SAME_AS

template <>
const GpuApi<CudaRuntime>& gpu_api<CudaRuntime>() {
  static const GpuApi<CudaRuntime> api =
      load_gpu_api<CudaRuntime>("the CUDA runtime (" HMC_CUDART_SONAME ")", HMC_CUDART_SONAME, HMC_CUDART_PATH);
  return api;
}

}  // namespace hmc::detail
