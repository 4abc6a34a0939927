#include "memory/hip_memory.hpp"

#include <string>

#include "hmc/error.hpp"
#include "hmc/runtime/log.hpp"
#include "memory/hip_api.hpp"

namespace hmc::detail {

namespace {

std::string describe(hipError_t e) {
  const std::string text = hip_api().hipGetErrorString(e), name = hip_api().hipGetErrorName(e);
  return text == name ? name : text + " (" + name + ")";  // HIP often returns the name as the text
}

void check(hipError_t e, const std::string& what) {
  if (e == hipSuccess) return;
  static_cast<void>(hip_api().hipGetLastError());  // clear the non-sticky error so later calls start clean
  throw Error(Status::ERROR, what + ": " + describe(e));
}

// Makes device_id current for one call and restores the caller's device afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device_id) noexcept : target_(device_id) {
    status_ = hip_api().hipGetDevice(&previous_);
    if (status_ == hipSuccess && previous_ != target_) status_ = hip_api().hipSetDevice(target_);
  }
  ~DeviceGuard() {
    if (status_ == hipSuccess && previous_ != target_) {
      const hipError_t e = hip_api().hipSetDevice(previous_);
      if (e != hipSuccess)
        runtime::log().warn("could not restore HIP device {} after a call on device {}: {}", previous_, target_,
                            describe(e));
    }
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  hipError_t status() const noexcept { return status_; }
  void check_entered() const { check(status_, "hipSetDevice(" + std::to_string(target_) + ")"); }

 private:
  int target_;
  int previous_ = -1;
  hipError_t status_;
};

}  // namespace

void HipMemory::check_device(int device_id) {
  if (device_id < 0)
    throw InvalidArgumentError("HIP device id " + std::to_string(device_id) + ": device ids start at 0");
  int count = 0;
  const hipError_t e = hip_api().hipGetDeviceCount(&count);
  if (e != hipSuccess) {
    static_cast<void>(hip_api().hipGetLastError());
    throw Error(Status::ERROR, "no HIP device: hipGetDeviceCount returned " + describe(e));
  }
  if (device_id >= count)
    throw InvalidArgumentError("HIP device id " + std::to_string(device_id) + ": this machine has " +
                               std::to_string(count) + " HIP device(s); pick an id below that");
}

HipMemory::HipMemory(int device_id) : Memory(device_id) { check_device(device_id); }

void* HipMemory::allocate(std::size_t size) {
  if (size == 0) throw InvalidArgumentError("HIP allocation of 0 bytes: ask for at least 1 byte");
  DeviceGuard guard(device_id());
  guard.check_entered();
  void* p = nullptr;
  check(hip_api().hipMalloc(&p, size),
        "hipMalloc of " + std::to_string(size) + " bytes on HIP device " + std::to_string(device_id()));
  return p;
}

void HipMemory::free(void* ptr, std::size_t size) noexcept {
  if (ptr == nullptr) return;
  DeviceGuard guard(device_id());
  hipError_t e = guard.status();
  if (e == hipSuccess) e = hip_api().hipFree(ptr);
  if (e != hipSuccess) {
    static_cast<void>(hip_api().hipGetLastError());
    runtime::log().warn("hipFree of a {}-byte buffer on HIP device {} failed: {}", size, device_id(), describe(e));
  }
}

void HipMemory::copy(void* dst, const void* src, std::size_t n, int kind, const char* direction) const {
  if (n == 0) return;
  DeviceGuard guard(device_id());
  guard.check_entered();
  const std::string what = std::string("hipMemcpy ") + direction + " of " + std::to_string(n) +
                           " bytes on HIP device " + std::to_string(device_id());
  check(hip_api().hipMemcpy(dst, src, n, static_cast<hipMemcpyKind>(kind)), what);
  // hipMemcpy may return before a host-to-device or device-to-device copy lands; a NIC reading the
  // buffer next is outside HIP's stream order, so wait here.
  if (kind != hipMemcpyDeviceToHost) check(hip_api().hipStreamSynchronize(nullptr), what + " (synchronize)");
}

void HipMemory::copy_host_to_device(void* dst, const void* src, std::size_t n) const {
  copy(dst, src, n, hipMemcpyHostToDevice, "host-to-device");
}

void HipMemory::copy_device_to_host(void* dst, const void* src, std::size_t n) const {
  copy(dst, src, n, hipMemcpyDeviceToHost, "device-to-host");
}

void HipMemory::copy_device_to_device(void* dst, const void* src, std::size_t n) const {
  copy(dst, src, n, hipMemcpyDeviceToDevice, "device-to-device");
}

}  // namespace hmc::detail
