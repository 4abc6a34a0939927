#pragma once
// Where a test's device emulation plugs into GPU staging: while a stand-in is set for a memory type,
// device buffers and device copies of that type go to it instead of the vendor runtime. The product
// sets none; the test library's DeviceEmulation does.
#include <memory>

#include "hmc/memory.hpp"
#include "hmc/memory_type.hpp"
#include "staging/device_copier.hpp"

namespace hmc::detail {

class DeviceStandIn {
 public:
  virtual ~DeviceStandIn() = default;
  virtual std::shared_ptr<DeviceCopier> open_copier(int device_id) = 0;
  virtual std::shared_ptr<Memory> memory(int device_id) = 0;

  // Sets the stand-in of a device memory type (nullptr clears it); it must outlive its setting.
  static void set(MemoryType type, DeviceStandIn* stand_in) noexcept;
  // The stand-in set for `type`, or nullptr.
  static DeviceStandIn* of(MemoryType type) noexcept;
};

}  // namespace hmc::detail
