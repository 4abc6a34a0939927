#pragma once
// GPU memory through a vendor runtime (Runtime: memory/cuda_api.hpp, memory/hip_api.hpp); every call
// runs on this backend's device. Declared without the runtime's headers, instantiated once per
// runtime (cuda_memory.cpp, hip_memory.cpp).
#include "hmc/memory.hpp"

namespace hmc::detail {

template <class Runtime>
class GpuMemory final : public Memory {
 public:
  // Throws what Memory::create must throw when device_id cannot be used on this machine.
  static void check_device(int device_id);

  explicit GpuMemory(int device_id);

  MemoryType type() const noexcept override;
  void* allocate(std::size_t size) override;
  void free(void* ptr, std::size_t size) noexcept override;
  void copy_host_to_device(void* dst, const void* src, std::size_t n) const override;
  void copy_device_to_host(void* dst, const void* src, std::size_t n) const override;
  void copy_device_to_device(void* dst, const void* src, std::size_t n) const override;

 private:
  void copy(void* dst, const void* src, std::size_t n, int kind, const char* direction) const;
};

struct CudaRuntime;
struct HipRuntime;
extern template class GpuMemory<CudaRuntime>;
extern template class GpuMemory<HipRuntime>;
using CudaMemory = GpuMemory<CudaRuntime>;
using HipMemory = GpuMemory<HipRuntime>;

}  // namespace hmc::detail
