#pragma once
// The kinds of memory a buffer can live in; the numbering is the reference system's.
#include <string_view>

namespace hmc {

enum class MemoryType : int {
  DEFAULT = 0,  // CPU
  CPU = 1,
  NVIDIA_GPU = 2,
  AMD_GPU = 3,
  CAMBRICON_MLU = 4,
  HUAWEI_ASCEND_NPU = 5,
  MOORE_GPU = 6,
};

// "default", "cpu", "nvidia_gpu", "amd_gpu", "cambricon_mlu", "huawei_ascend_npu", "moore_gpu".
std::string_view to_string(MemoryType t) noexcept;

}  // namespace hmc
