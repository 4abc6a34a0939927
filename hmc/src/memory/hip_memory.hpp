#pragma once
// AMD GPU memory through the ROCm HIP runtime; every call runs on this backend's device.
#include "hmc/memory.hpp"

namespace hmc::detail {

class HipMemory final : public Memory {
 public:
  // Throws what Memory::create must throw when device_id cannot be used on this machine.
  static void check_device(int device_id);

  explicit HipMemory(int device_id);

  MemoryType type() const noexcept override { return MemoryType::AMD_GPU; }
  void* allocate(std::size_t size) override;
  void free(void* ptr, std::size_t size) noexcept override;
  void copy_host_to_device(void* dst, const void* src, std::size_t n) const override;
  void copy_device_to_host(void* dst, const void* src, std::size_t n) const override;
  void copy_device_to_device(void* dst, const void* src, std::size_t n) const override;

 private:
  void copy(void* dst, const void* src, std::size_t n, int kind, const char* direction) const;
};

}  // namespace hmc::detail
