// GpuCopier over the HIP runtime.
#include "memory/hip_api.hpp"
#include "staging/gpu_copier.hpp"

namespace hmc::detail {

std::shared_ptr<DeviceCopier> open_hip_copier(int device_id) {
  return std::make_shared<GpuCopier<HipRuntime>>(device_id);
}

}  // namespace hmc::detail
