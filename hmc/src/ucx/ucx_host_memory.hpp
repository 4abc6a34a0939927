#pragma once
// Host memory allocated by UCX (ucp_mem_map with ALLOCATE): on this host that is shared memory
// (sysv/posix), which same-host peers map so that put/get are plain copies with no remote
// progress, as in ucx_perftest. The session buffer uses it for MemoryType::CPU.
#include <map>
#include <memory>
#include <mutex>

#include "hmc/memory.hpp"
#include "ucx/ucx_context.hpp"

namespace hmc::detail {

class UcxHostMemory final : public Memory {
 public:
  explicit UcxHostMemory(std::shared_ptr<UcxContext> context) : Memory(0), context_(std::move(context)) {}

  MemoryType type() const noexcept override { return MemoryType::CPU; }
  void* allocate(std::size_t size) override;
  void free(void* ptr, std::size_t size) noexcept override;
  void copy_host_to_device(void* dst, const void* src, std::size_t n) const override;
  void copy_device_to_host(void* dst, const void* src, std::size_t n) const override;
  void copy_device_to_device(void* dst, const void* src, std::size_t n) const override;

  // The registration UCX made when it allocated ptr (nullptr if ptr is not ours).
  ucp_mem_h memh_of(const void* ptr) const;

 private:
  std::shared_ptr<UcxContext> context_;
  mutable std::mutex mutex_;
  std::map<const void*, ucp_mem_h> allocations_;
};

}  // namespace hmc::detail
