// GpuMemory over the CUDA runtime.
#include "memory/cuda_api.hpp"
#include "memory/gpu_memory_impl.hpp"

namespace hmc::detail {

template class GpuMemory<CudaRuntime>;

}  // namespace hmc::detail
