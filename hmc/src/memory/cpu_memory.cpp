#include "memory/cpu_memory.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>

#include "hmc/error.hpp"
#include "hmc/runtime/log.hpp"

namespace hmc::detail {

namespace {

void check_pointers(const void* dst, const void* src, std::size_t n, const char* operation) {
  if (n > 0 && (dst == nullptr || src == nullptr))
    throw InvalidArgumentError(std::string("CPU ") + operation + " of " + std::to_string(n) + " bytes with a null " +
                               (dst == nullptr ? "destination" : "source") + ": pass a valid pointer or n = 0");
}

}  // namespace

void CpuMemory::check_device(int device_id) {
  if (device_id < 0)
    throw InvalidArgumentError("CPU memory with device id " + std::to_string(device_id) + ": device ids start at 0");
}

CpuMemory::CpuMemory(int device_id) : Memory(device_id) { check_device(device_id); }

void* CpuMemory::allocate(std::size_t size) {
  if (size == 0) throw InvalidArgumentError("CPU allocation of 0 bytes: ask for at least 1 byte");
  // MAP_NORESERVE: a buffer sized for the largest transfer must not count against overcommit up front.
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    throw Error(Status::ERROR, "CPU allocation of " + std::to_string(size) +
                                   " bytes failed: mmap: " + std::generic_category().message(err));
  }
  return p;
}

void CpuMemory::free(void* ptr, std::size_t size) noexcept {
  if (ptr == nullptr) return;
  if (::munmap(ptr, size) != 0)
    runtime::log().warn("munmap of a {}-byte CPU buffer failed: {}", size, std::generic_category().message(errno));
}

void CpuMemory::copy_host_to_device(void* dst, const void* src, std::size_t n) const {
  check_pointers(dst, src, n, "host-to-device copy");
  if (n > 0) std::memcpy(dst, src, n);
}

void CpuMemory::copy_device_to_host(void* dst, const void* src, std::size_t n) const {
  check_pointers(dst, src, n, "device-to-host copy");
  if (n > 0) std::memcpy(dst, src, n);
}

void CpuMemory::copy_device_to_device(void* dst, const void* src, std::size_t n) const {
  check_pointers(dst, src, n, "device-to-device copy");
  // memmove: copy_within may pass overlapping ranges of one buffer.
  if (n > 0) std::memmove(dst, src, n);
}

}  // namespace hmc::detail
