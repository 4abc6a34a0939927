#pragma once
// EMULATION FOR TESTS ONLY: host memory labelled as a device type, moved with memcpy. While a test
// holds a DeviceEmulation, sessions get this memory for their device buffers and stage it exactly
// as they would stage GPU memory (the staging protocol then runs for real over UCX on a machine
// without a GPU). Never enabled by anything but a test.
#include <atomic>
#include <memory>

#include "hmc/memory.hpp"
#include "staging/device_copier.hpp"
#include "staging/device_stand_in.hpp"

namespace hmc::detail {

// Enables the emulation of one device type for as long as it lives (one at a time per type): the
// type's DeviceStandIn.
class DeviceEmulation final : public DeviceStandIn {
 public:
  explicit DeviceEmulation(MemoryType type);
  ~DeviceEmulation() override;
  DeviceEmulation(const DeviceEmulation&) = delete;
  DeviceEmulation& operator=(const DeviceEmulation&) = delete;

  // Copies started from now on never complete while set (a stalled device, for deadline tests).
  void stall(bool on) noexcept;
  // The next n copies fail with Status::ERROR (a device fault).
  void fail_next(int n) noexcept;
  // Copies started so far (every copier of this type), to check that staging really happened.
  std::uint64_t copies() const noexcept;

  std::shared_ptr<DeviceCopier> open_copier(int device_id) override;
  std::shared_ptr<Memory> memory(int device_id) override;

 private:
  MemoryType type_;
};

// The emulated device's allocator: page-aligned host memory that reports `type`.
class EmulatedDeviceMemory final : public Memory {
 public:
  EmulatedDeviceMemory(MemoryType type, int device_id) : Memory(device_id), type_(type) {}
  MemoryType type() const noexcept override { return type_; }
  void* allocate(std::size_t size) override;
  void free(void* ptr, std::size_t size) noexcept override;
  void copy_host_to_device(void* dst, const void* src, std::size_t n) const override;
  void copy_device_to_host(void* dst, const void* src, std::size_t n) const override;
  void copy_device_to_device(void* dst, const void* src, std::size_t n) const override;

 private:
  MemoryType type_;
};

}  // namespace hmc::detail
