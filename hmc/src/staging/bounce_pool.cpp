#include "staging/bounce_pool.hpp"

#include <algorithm>

#include "hmc/error.hpp"

namespace hmc::detail {

BouncePool::BouncePool(std::shared_ptr<DeviceCopier> copier, std::size_t total, std::size_t chunk)
    : copier_(std::move(copier)), chunk_(chunk), slots_(chunk == 0 ? 0 : std::max<std::size_t>(1, total / chunk)) {
  if (chunk_ == 0) throw InvalidArgumentError("staging chunk must be > 0 bytes");
  base_ = static_cast<std::byte*>(copier_->allocate_pinned(size()));
  free_.reserve(slots_);
  for (std::size_t i = slots_; i-- > 0;) free_.push_back(i * chunk_);
}

BouncePool::~BouncePool() { copier_->free_pinned(base_, size()); }

std::optional<std::size_t> BouncePool::acquire() {
  if (free_.empty()) return std::nullopt;
  const std::size_t at = free_.back();
  free_.pop_back();
  return at;
}

void BouncePool::release(std::size_t offset) { free_.push_back(offset); }

}  // namespace hmc::detail
