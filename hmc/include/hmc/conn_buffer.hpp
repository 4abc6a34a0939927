#pragma once
// One region of a chosen size and memory type, with bounds-checked copies in and out.
#include <cstddef>
#include <memory>

#include "hmc/memory.hpp"

namespace hmc {

class ConnBuffer {
 public:
  // Allocates size bytes from memory; size 0 or a null memory -> InvalidArgumentError.
  ConnBuffer(std::shared_ptr<Memory> memory, std::size_t size);
  ~ConnBuffer();

  // Neither copyable nor movable: its address gets registered with UCX.
  ConnBuffer(const ConnBuffer&) = delete;
  ConnBuffer& operator=(const ConnBuffer&) = delete;

  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  MemoryType type() const noexcept { return memory_->type(); }
  int device_id() const noexcept { return memory_->device_id(); }
  Memory& memory() const noexcept { return *memory_; }

  // OutOfRangeError unless [offset, offset + n) lies inside the buffer (overflow-safe).
  void check_range(std::size_t offset, std::size_t n) const;

  // Host memory -> buffer and back (host_to_device / device_to_host for GPU buffers).
  void write_from_cpu(const void* src, std::size_t n, std::size_t offset = 0);
  void read_to_cpu(void* dst, std::size_t n, std::size_t offset = 0) const;

  // Device memory owned by `gpu` -> buffer and back. gpu == nullptr means the buffer's own
  // backend, which must then be a GPU; a GPU buffer only exchanges with the same device type.
  void write_from_gpu(const void* src, std::size_t n, std::size_t offset = 0, const Memory* gpu = nullptr);
  void read_to_gpu(void* dst, std::size_t n, std::size_t offset = 0, const Memory* gpu = nullptr) const;

  // Both ranges are checked; overlapping ranges are copied correctly on every memory type.
  void copy_within(std::size_t dst_offset, std::size_t src_offset, std::size_t n);

 private:
  // The backend that moves bytes between this buffer and the device memory at the caller's pointer.
  const Memory& device_peer(const Memory* gpu, const char* operation) const;

  std::shared_ptr<Memory> memory_;
  std::size_t size_;
  void* data_;
};

}  // namespace hmc
