// GpuMemory over the HIP runtime.
#include "memory/hip_api.hpp"
#include "memory/gpu_memory_impl.hpp"

namespace hmc::detail {

template class GpuMemory<HipRuntime>;

}  // namespace hmc::detail
