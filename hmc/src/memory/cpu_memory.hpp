#pragma once
// Host memory: anonymous mmap, so a large buffer costs nothing until its pages are touched.
#include "hmc/memory.hpp"

namespace hmc::detail {

// Not final: UcxHostMemory is host memory that UCX allocates.
class CpuMemory : public Memory {
 public:
  // CPU memory has no devices to choose among; the id is only validated (>= 0) and kept.
  static void check_device(int device_id);

  explicit CpuMemory(int device_id);

  MemoryType type() const noexcept override { return MemoryType::CPU; }
  void* allocate(std::size_t size) override;
  void free(void* ptr, std::size_t size) noexcept override;
  void copy_host_to_device(void* dst, const void* src, std::size_t n) const override;
  void copy_device_to_host(void* dst, const void* src, std::size_t n) const override;
  void copy_device_to_device(void* dst, const void* src, std::size_t n) const override;
};

}  // namespace hmc::detail
