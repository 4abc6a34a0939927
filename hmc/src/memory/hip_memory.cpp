// GpuMemory over the HIP runtime.
#include "memory/gpu_memory_impl.hpp"
#include "memory/hip_api.hpp"

namespace hmc::detail {

template class GpuMemory<HipRuntime>;

}  // namespace hmc::detail
