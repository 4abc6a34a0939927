#pragma once
// Host memory allocated by UCX (ucp_mem_map with ALLOCATE): on this host that is shared memory
// (sysv/posix), which same-host peers map so that put/get are plain copies with no remote
// progress, as in ucx_perftest. The session buffer uses it for MemoryType::CPU.
#include <map>
#include <memory>
#include <mutex>

#include "memory/cpu_memory.hpp"
#include "ucx/ucx_context.hpp"

namespace hmc::detail {

class UcxHostMemory final : public CpuMemory {
 public:
  UcxHostMemory(std::shared_ptr<UcxContext> context, int device_id)
      : CpuMemory(device_id), context_(std::move(context)) {}

  void* allocate(std::size_t size) override;
  void free(void* ptr, std::size_t size) noexcept override;

  // The registration UCX made when it allocated ptr (nullptr if ptr is not ours).
  ucp_mem_h memh_of(const void* ptr) const;

 private:
  std::shared_ptr<UcxContext> context_;
  mutable std::mutex mutex_;
  std::map<const void*, ucp_mem_h> allocations_;
};

}  // namespace hmc::detail
