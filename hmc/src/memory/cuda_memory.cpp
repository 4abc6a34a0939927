#include "memory/cuda_memory.hpp"

#include <string>

#include "hmc/error.hpp"
#include "hmc/runtime/log.hpp"
#include "memory/cuda_api.hpp"

namespace hmc::detail {

namespace {

std::string describe(cudaError_t e) {
  return std::string(cuda_api().cudaGetErrorString(e)) + " (" + cuda_api().cudaGetErrorName(e) + ")";
}

void check(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return;
  static_cast<void>(cuda_api().cudaGetLastError());  // clear the non-sticky error so later calls start clean
  throw Error(Status::ERROR, what + ": " + describe(e));
}

// Makes device_id current for one call and restores the caller's device afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device_id) noexcept : target_(device_id) {
    status_ = cuda_api().cudaGetDevice(&previous_);
    if (status_ == cudaSuccess && previous_ != target_) status_ = cuda_api().cudaSetDevice(target_);
  }
  ~DeviceGuard() {
    if (status_ == cudaSuccess && previous_ != target_) {
      const cudaError_t e = cuda_api().cudaSetDevice(previous_);
      if (e != cudaSuccess)
        runtime::log().warn("could not restore CUDA device {} after a call on device {}: {}", previous_, target_,
                            describe(e));
    }
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  cudaError_t status() const noexcept { return status_; }
  void check_entered() const { check(status_, "cudaSetDevice(" + std::to_string(target_) + ")"); }

 private:
  int target_;
  int previous_ = -1;
  cudaError_t status_;
};

}  // namespace

void CudaMemory::check_device(int device_id) {
  if (device_id < 0)
    throw InvalidArgumentError("CUDA device id " + std::to_string(device_id) + ": device ids start at 0");
  int count = 0;
  const cudaError_t e = cuda_api().cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    static_cast<void>(cuda_api().cudaGetLastError());
    throw Error(Status::ERROR, "no CUDA device: cudaGetDeviceCount returned " + describe(e));
  }
  if (device_id >= count)
    throw InvalidArgumentError("CUDA device id " + std::to_string(device_id) + ": this machine has " +
                               std::to_string(count) + " CUDA device(s); pick an id below that");
}

CudaMemory::CudaMemory(int device_id) : Memory(device_id) { check_device(device_id); }

void* CudaMemory::allocate(std::size_t size) {
  if (size == 0) throw InvalidArgumentError("CUDA allocation of 0 bytes: ask for at least 1 byte");
  DeviceGuard guard(device_id());
  guard.check_entered();
  void* p = nullptr;
  check(cuda_api().cudaMalloc(&p, size),
        "cudaMalloc of " + std::to_string(size) + " bytes on CUDA device " + std::to_string(device_id()));
  return p;
}

void CudaMemory::free(void* ptr, std::size_t size) noexcept {
  if (ptr == nullptr) return;
  DeviceGuard guard(device_id());
  cudaError_t e = guard.status();
  if (e == cudaSuccess) e = cuda_api().cudaFree(ptr);
  if (e != cudaSuccess) {
    static_cast<void>(cuda_api().cudaGetLastError());
    runtime::log().warn("cudaFree of a {}-byte buffer on CUDA device {} failed: {}", size, device_id(), describe(e));
  }
}

void CudaMemory::copy(void* dst, const void* src, std::size_t n, int kind, const char* direction) const {
  if (n == 0) return;
  DeviceGuard guard(device_id());
  guard.check_entered();
  const std::string what = std::string("cudaMemcpy ") + direction + " of " + std::to_string(n) +
                           " bytes on CUDA device " + std::to_string(device_id());
  check(cuda_api().cudaMemcpy(dst, src, n, static_cast<cudaMemcpyKind>(kind)), what);
  // cudaMemcpy may return before a host-to-device or device-to-device copy lands; a NIC reading the
  // buffer next is outside CUDA's stream order, so wait here.
  if (kind != cudaMemcpyDeviceToHost) check(cuda_api().cudaStreamSynchronize(nullptr), what + " (synchronize)");
}

void CudaMemory::copy_host_to_device(void* dst, const void* src, std::size_t n) const {
  copy(dst, src, n, cudaMemcpyHostToDevice, "host-to-device");
}

void CudaMemory::copy_device_to_host(void* dst, const void* src, std::size_t n) const {
  copy(dst, src, n, cudaMemcpyDeviceToHost, "device-to-host");
}

void CudaMemory::copy_device_to_device(void* dst, const void* src, std::size_t n) const {
  copy(dst, src, n, cudaMemcpyDeviceToDevice, "device-to-device");
}

}  // namespace hmc::detail
