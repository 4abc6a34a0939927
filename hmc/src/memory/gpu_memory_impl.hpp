#pragma once
// GpuMemory's members, for the one file per runtime that instantiates them.
#include <string>

#include "hmc/error.hpp"
#include "hmc/runtime/log.hpp"
#include "memory/gpu_memory.hpp"
#include "memory/gpu_runtime.hpp"

namespace hmc::detail {

namespace gpu_memory_detail {

// Makes device_id current for one call and restores the caller's device afterwards.
template <class Runtime>
class DeviceGuard {
 public:
  using Error = typename Runtime::Error;

  explicit DeviceGuard(int device_id) noexcept : target_(device_id) {
    status_ = gpu_api<Runtime>().get_device(&previous_);
    if (status_ == Runtime::success && previous_ != target_) status_ = gpu_api<Runtime>().set_device(target_);
  }
  ~DeviceGuard() {
    if (status_ == Runtime::success && previous_ != target_) {
      const Error e = gpu_api<Runtime>().set_device(previous_);
      if (e != Runtime::success)
        runtime::log().warn("could not restore {} device {} after a call on device {}: {}", Runtime::name, previous_,
                            target_, describe_gpu_error<Runtime>(e));
    }
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  Error status() const noexcept { return status_; }
  void check_entered() const {
    check_gpu<Runtime>(status_, gpu_text(Runtime::symbols.set_device, "(" + std::to_string(target_) + ")"));
  }

 private:
  int target_;
  int previous_ = -1;
  Error status_;
};

}  // namespace gpu_memory_detail

template <class Runtime>
void GpuMemory<Runtime>::check_device(int device_id) {
  const std::string name = Runtime::name;
  if (device_id < 0)
    throw InvalidArgumentError(name + " device id " + std::to_string(device_id) + ": device ids start at 0");
  int count = 0;
  const auto e = gpu_api<Runtime>().get_device_count(&count);
  if (e != Runtime::success) {
    clear_gpu_error<Runtime>();
    throw Error(Status::ERROR, "no " + name + " device: " + Runtime::symbols.get_device_count + " returned " +
                                   describe_gpu_error<Runtime>(e));
  }
  if (device_id >= count)
    throw InvalidArgumentError(name + " device id " + std::to_string(device_id) + ": this machine has " +
                               std::to_string(count) + " " + name + " device(s); pick an id below that");
}

template <class Runtime>
GpuMemory<Runtime>::GpuMemory(int device_id) : Memory(device_id) {
  check_device(device_id);
}

template <class Runtime>
MemoryType GpuMemory<Runtime>::type() const noexcept {
  return Runtime::memory_type;
}

template <class Runtime>
void* GpuMemory<Runtime>::allocate(std::size_t size) {
  if (size == 0) throw InvalidArgumentError(gpu_text(Runtime::name, " allocation of 0 bytes: ask for at least 1 byte"));
  gpu_memory_detail::DeviceGuard<Runtime> guard(device_id());
  guard.check_entered();
  void* p = nullptr;
  const std::string where = " bytes on " + std::string(Runtime::name) + " device " + std::to_string(device_id());
  check_gpu<Runtime>(gpu_api<Runtime>().malloc(&p, size),
                     gpu_text(Runtime::symbols.malloc, " of " + std::to_string(size) + where));
  return p;
}

template <class Runtime>
void GpuMemory<Runtime>::free(void* ptr, std::size_t size) noexcept {
  if (ptr == nullptr) return;
  gpu_memory_detail::DeviceGuard<Runtime> guard(device_id());
  auto e = guard.status();
  if (e == Runtime::success) e = gpu_api<Runtime>().free(ptr);
  if (e != Runtime::success) {
    clear_gpu_error<Runtime>();
    runtime::log().warn("{} of a {}-byte buffer on {} device {} failed: {}", Runtime::symbols.free, size, Runtime::name,
                        device_id(), describe_gpu_error<Runtime>(e));
  }
}

template <class Runtime>
void GpuMemory<Runtime>::copy(void* dst, const void* src, std::size_t n, int kind, const char* direction) const {
  if (n == 0) return;
  gpu_memory_detail::DeviceGuard<Runtime> guard(device_id());
  guard.check_entered();
  const std::string what =
      gpu_text(Runtime::symbols.memcpy, std::string(" ") + direction + " of " + std::to_string(n) + " bytes on " +
                                            Runtime::name + " device " + std::to_string(device_id()));
  check_gpu<Runtime>(gpu_api<Runtime>().memcpy(dst, src, n, static_cast<typename Runtime::MemcpyKind>(kind)), what);
  // The copy may return before a host-to-device or device-to-device copy lands; a NIC reading the
  // buffer next is outside the runtime's stream order, so wait here.
  if (kind != Runtime::device_to_host)
    check_gpu<Runtime>(gpu_api<Runtime>().stream_synchronize(nullptr), what + " (synchronize)");
}

template <class Runtime>
void GpuMemory<Runtime>::copy_host_to_device(void* dst, const void* src, std::size_t n) const {
  copy(dst, src, n, Runtime::host_to_device, "host-to-device");
}

template <class Runtime>
void GpuMemory<Runtime>::copy_device_to_host(void* dst, const void* src, std::size_t n) const {
  copy(dst, src, n, Runtime::device_to_host, "device-to-host");
}

template <class Runtime>
void GpuMemory<Runtime>::copy_device_to_device(void* dst, const void* src, std::size_t n) const {
  copy(dst, src, n, Runtime::device_to_device, "device-to-device");
}

}  // namespace hmc::detail
