#include "hmc/memory.hpp"

#include <string>

#include "hmc/error.hpp"
#include "memory/cpu_memory.hpp"
#include "memory/gpu_memory.hpp"

namespace hmc {

std::string_view to_string(MemoryType t) noexcept {
  switch (t) {
    case MemoryType::DEFAULT: return "default";
    case MemoryType::CPU: return "cpu";
    case MemoryType::NVIDIA_GPU: return "nvidia_gpu";
    case MemoryType::AMD_GPU: return "amd_gpu";
    case MemoryType::CAMBRICON_MLU: return "cambricon_mlu";
    case MemoryType::HUAWEI_ASCEND_NPU: return "huawei_ascend_npu";
    case MemoryType::MOORE_GPU: return "moore_gpu";
  }
  return "unknown";
}

namespace {

[[noreturn]] void throw_unsupported(MemoryType type, const char* how_to_get_it) {
  throw UnsupportedError(std::string(to_string(type)) + " memory is unsupported in this build" + how_to_get_it);
}

[[noreturn]] void throw_unknown(MemoryType type) {
  throw InvalidArgumentError("memory type " + std::to_string(static_cast<int>(type)) +
                             " is not a MemoryType: use DEFAULT, CPU, NVIDIA_GPU, AMD_GPU, CAMBRICON_MLU, "
                             "HUAWEI_ASCEND_NPU or MOORE_GPU");
}

}  // namespace

std::unique_ptr<Memory> Memory::create(MemoryType type, int device_id) {
  switch (type) {
    case MemoryType::DEFAULT:
    case MemoryType::CPU: return std::make_unique<detail::CpuMemory>(device_id);
    case MemoryType::NVIDIA_GPU:
#ifdef HMC_HAVE_CUDA
      return std::make_unique<detail::CudaMemory>(device_id);
#else
      throw_unsupported(type, " (configure with the CUDA toolkit in /usr/local/cuda or CUDAToolkit_ROOT)");
#endif
    case MemoryType::AMD_GPU:
#ifdef HMC_HAVE_HIP
      return std::make_unique<detail::HipMemory>(device_id);
#else
      throw_unsupported(type, " (configure with the ROCm HIP runtime: Debian package libamdhip64-dev)");
#endif
    case MemoryType::CAMBRICON_MLU:
    case MemoryType::HUAWEI_ASCEND_NPU:
    case MemoryType::MOORE_GPU: throw_unsupported(type, " (HMC has no backend for it)");
  }
  throw_unknown(type);
}

bool Memory::available(MemoryType type, int device_id, std::string* why_not) {
  try {
    switch (type) {
      case MemoryType::DEFAULT:
      case MemoryType::CPU: detail::CpuMemory::check_device(device_id); return true;
#ifdef HMC_HAVE_CUDA
      case MemoryType::NVIDIA_GPU: detail::CudaMemory::check_device(device_id); return true;
#endif
#ifdef HMC_HAVE_HIP
      case MemoryType::AMD_GPU: detail::HipMemory::check_device(device_id); return true;
#endif
      default: create(type, device_id); return true;  // every other type throws the reason
    }
  } catch (const Error& e) {
    if (why_not != nullptr) *why_not = e.what();
    return false;
  }
}

}  // namespace hmc
