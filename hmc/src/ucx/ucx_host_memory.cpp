#include "ucx/ucx_host_memory.hpp"

#include <string>

#include "hmc/error.hpp"
#include "hmc/runtime/log.hpp"

namespace hmc::detail {

void* UcxHostMemory::allocate(std::size_t size) {
  if (size == 0) throw InvalidArgumentError("allocate: size must be > 0");
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  mp.length = size;
  mp.flags = UCP_MEM_MAP_ALLOCATE;
  ucp_mem_h memh = nullptr;
  ucs_status_t s = ucp_mem_map(context_->get(), &mp, &memh);
  if (s != UCS_OK)
    throw Error(Status::ERROR, "UCX could not allocate " + std::to_string(size) + " bytes: " + ucs_status_string(s));
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  s = ucp_mem_query(memh, &attr);
  if (s != UCS_OK || attr.length < size) {
    ucp_mem_unmap(context_->get(), memh);
    throw Error(Status::ERROR, "UCX allocation query failed");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  allocations_[attr.address] = memh;
  return attr.address;
}

void UcxHostMemory::free(void* ptr, std::size_t) noexcept {
  ucp_mem_h memh = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = allocations_.find(ptr);
    if (it == allocations_.end()) return;
    memh = it->second;
    allocations_.erase(it);
  }
  const ucs_status_t s = ucp_mem_unmap(context_->get(), memh);
  if (s != UCS_OK) runtime::log().warn("ucp_mem_unmap of the session buffer: {}", ucs_status_string(s));
}

ucp_mem_h UcxHostMemory::memh_of(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = allocations_.find(ptr);
  return it == allocations_.end() ? nullptr : it->second;
}

}  // namespace hmc::detail
