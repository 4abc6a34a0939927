// GpuCopier over the CUDA runtime.
#include "memory/cuda_api.hpp"
#include "staging/gpu_copier.hpp"

namespace hmc::detail {

std::shared_ptr<DeviceCopier> open_cuda_copier(int device_id) {
  return std::make_shared<GpuCopier<CudaRuntime>>(device_id);
}

}  // namespace hmc::detail
