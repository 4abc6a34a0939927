#pragma once
// The device-copy seam of GPU staging: asynchronous copies between host memory and one device's
// memory, each reported once through a completion fd the event loop waits on, and the pinned host
// memory those copies need to run asynchronously. CUDA and HIP implement it (and the tests' device
// emulation, through DeviceStandIn).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "hmc/memory.hpp"
#include "hmc/memory_type.hpp"
#include "hmc/runtime/async_op.hpp"

namespace hmc::detail {

using runtime::error_code;

class DeviceCopier {
 public:
  enum class Direction : std::uint8_t { to_device, to_host };
  struct Done {
    std::uint64_t id = 0;
    error_code ec;
  };

  virtual ~DeviceCopier();
  DeviceCopier(const DeviceCopier&) = delete;
  DeviceCopier& operator=(const DeviceCopier&) = delete;

  MemoryType type() const noexcept { return type_; }
  int device_id() const noexcept { return device_id_; }

  // Starts copying n bytes (host memory should be pinned); `id` is reported once by drain(), when
  // the bytes landed or with the copy's error. An error returned here: nothing was started.
  virtual error_code start(Direction d, void* dst, const void* src, std::size_t n, std::uint64_t id) = 0;
  // Page-locked host memory the device copies from and to asynchronously; Error when refused.
  virtual void* allocate_pinned(std::size_t n) = 0;
  virtual void free_pinned(void* p, std::size_t n) noexcept = 0;
  // Waits for every copy started so far to end (before the memory they touch is freed).
  virtual void synchronize() noexcept {}

  // Readable while drain() has something to return; owned by the copier.
  int fd() const noexcept { return efd_; }
  // Appends the copies finished since the last call (any order) and clears the fd.
  void drain(std::vector<Done>& out);

 protected:
  DeviceCopier(MemoryType type, int device_id);
  // Any thread (driver callbacks): records a finished copy and wakes the fd.
  void finished(std::uint64_t id, error_code ec) noexcept;

 private:
  MemoryType type_;
  int device_id_;
  int efd_ = -1;
  std::mutex mutex_;
  std::vector<Done> done_;
};

// Whether memory of this type lives on a device (needs a device copy to reach host memory).
bool is_device_memory(MemoryType type) noexcept;
// The copier for device memory of `type`: CUDA or HIP (streams with completion callbacks), or the
// type's DeviceStandIn while one is set. UnsupportedError when this build has no backend for it.
std::shared_ptr<DeviceCopier> open_device_copier(MemoryType type, int device_id);
// Allocator of a session's device buffer: Memory::create, or the type's DeviceStandIn while one is set.
std::shared_ptr<Memory> device_memory(MemoryType type, int device_id);

}  // namespace hmc::detail
