#pragma once
// One memory backend per device type: allocation and the three copy directions on one device.
#include <cstddef>
#include <memory>
#include <string>

#include "hmc/memory_type.hpp"

namespace hmc {

class Memory {
 public:
  // DEFAULT means CPU. UnsupportedError for a backend this build lacks (Cambricon, Ascend and
  // Moore Threads always); InvalidArgumentError for a device id < 0 or >= the device count;
  // Error when the driver cannot be queried.
  static std::unique_ptr<Memory> create(MemoryType type, int device_id = 0);

  // Whether create(type, device_id) would succeed here; *why_not gets the reason when not.
  static bool available(MemoryType type, int device_id = 0, std::string* why_not = nullptr);

  virtual ~Memory() = default;
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;

  virtual MemoryType type() const noexcept = 0;
  int device_id() const noexcept { return device_id_; }

  // Always on device_id(), whatever device is current; size 0 -> InvalidArgumentError,
  // failure -> Error with the driver's message.
  virtual void* allocate(std::size_t size) = 0;
  virtual void free(void* ptr, std::size_t size) noexcept = 0;

  // n bytes between host memory and this backend's memory; n == 0 does nothing.
  virtual void copy_host_to_device(void* dst, const void* src, std::size_t n) const = 0;
  virtual void copy_device_to_host(void* dst, const void* src, std::size_t n) const = 0;
  // Overlapping ranges are allowed only on CPU (memmove); GPU drivers leave them undefined.
  virtual void copy_device_to_device(void* dst, const void* src, std::size_t n) const = 0;

 protected:
  explicit Memory(int device_id) : device_id_(device_id) {}

 private:
  int device_id_;
};

}  // namespace hmc
