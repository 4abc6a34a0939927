#pragma once
// Bounded pinned host memory for staging: `total` bytes in equal `chunk`-byte slots, from the
// device's copier (so its copies run asynchronously). Operations take a slot per piece in flight
// and wait (FIFO, in StagingTransport) when none is free. Loop thread only.
#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "staging/device_copier.hpp"

namespace hmc::detail {

class BouncePool {
 public:
  BouncePool(std::shared_ptr<DeviceCopier> copier, std::size_t total, std::size_t chunk);
  ~BouncePool();
  BouncePool(const BouncePool&) = delete;
  BouncePool& operator=(const BouncePool&) = delete;

  std::byte* base() const noexcept { return base_; }
  std::size_t size() const noexcept { return chunk_ * slots_; }
  std::size_t chunk() const noexcept { return chunk_; }
  std::size_t slots() const noexcept { return slots_; }

  // A free slot's offset from base(), or nullopt when every slot is in use.
  std::optional<std::size_t> acquire();
  void release(std::size_t offset);

 private:
  std::shared_ptr<DeviceCopier> copier_;
  std::size_t chunk_;
  std::size_t slots_;
  std::byte* base_ = nullptr;
  std::vector<std::size_t> free_;
};

}  // namespace hmc::detail
