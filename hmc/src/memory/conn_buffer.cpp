#include "hmc/conn_buffer.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "hmc/error.hpp"

namespace hmc {

namespace {

// What a user can change when data does not fit: the knobs by their user-facing names.
constexpr const char* kRangeAdvice =
    ": keep offset + size within it, create the session with a larger buffer_size (Python buffer_size=, "
    "C++ SessionOptions::buffer_size), or register the data's memory (Python register(), C++ "
    "Session::register_memory) and move it from there";

// Staging chunk for overlapping copies on GPUs, whose device-to-device copies forbid overlap.
constexpr std::size_t overlap_chunk = std::size_t{16} << 20;

std::byte* at(void* base, std::size_t offset) noexcept { return static_cast<std::byte*>(base) + offset; }

void check_pointer(const void* p, std::size_t n, const char* operation, const char* name) {
  if (n > 0 && p == nullptr)
    throw InvalidArgumentError(std::string("ConnBuffer::") + operation + " of " + std::to_string(n) +
                               " bytes with a null " + name + ": pass a valid pointer or n = 0");
}

std::shared_ptr<Memory> require(std::shared_ptr<Memory> memory) {
  if (!memory) throw InvalidArgumentError("ConnBuffer needs a Memory backend: pass Memory::create(type, device_id)");
  return memory;
}

}  // namespace

ConnBuffer::ConnBuffer(std::shared_ptr<Memory> memory, std::size_t size)
    : memory_(require(std::move(memory))), size_(size), data_(nullptr) {
  if (size == 0) throw InvalidArgumentError("ConnBuffer of 0 bytes: ask for at least 1 byte");
  data_ = memory_->allocate(size);
}

ConnBuffer::~ConnBuffer() { memory_->free(data_, size_); }

void ConnBuffer::check_range(std::size_t offset, std::size_t n) const {
  // Written as two comparisons so offset + n can never wrap around.
  if (n > size_ || offset > size_ - n)
    throw OutOfRangeError(std::to_string(n) + " bytes at offset " + std::to_string(offset) +
                          " do not fit in the session buffer of " + std::to_string(size_) + " bytes" + kRangeAdvice);
}

void ConnBuffer::write_from_cpu(const void* src, std::size_t n, std::size_t offset) {
  check_range(offset, n);
  check_pointer(src, n, "write_from_cpu", "source");
  if (n > 0) memory_->copy_host_to_device(at(data_, offset), src, n);
}

void ConnBuffer::read_to_cpu(void* dst, std::size_t n, std::size_t offset) const {
  check_range(offset, n);
  check_pointer(dst, n, "read_to_cpu", "destination");
  if (n > 0) memory_->copy_device_to_host(dst, at(data_, offset), n);
}

const Memory& ConnBuffer::device_peer(const Memory* gpu, const char* operation) const {
  const MemoryType own = type();
  if (gpu == nullptr) {
    if (own == MemoryType::CPU)
      throw InvalidArgumentError(std::string("ConnBuffer::") + operation +
                                 " on a CPU buffer needs the GPU backend that owns the device pointer: "
                                 "pass it as `gpu`, or use the _cpu variant for host memory");
    return *memory_;
  }
  if (gpu->type() == MemoryType::CPU)
    throw InvalidArgumentError(std::string("ConnBuffer::") + operation +
                               " was given a CPU backend: use the _cpu variant for host memory");
  if (own != MemoryType::CPU && gpu->type() != own)
    throw InvalidArgumentError(std::string("ConnBuffer::") + operation + " between a " + std::string(to_string(own)) +
                               " buffer and " + std::string(to_string(gpu->type())) +
                               " memory: stage through host memory with the _cpu variants");
  return *gpu;
}

void ConnBuffer::write_from_gpu(const void* src, std::size_t n, std::size_t offset, const Memory* gpu) {
  check_range(offset, n);
  const Memory& peer = device_peer(gpu, "write_from_gpu");
  check_pointer(src, n, "write_from_gpu", "source");
  if (n == 0) return;
  if (type() == MemoryType::CPU) peer.copy_device_to_host(at(data_, offset), src, n);
  else memory_->copy_device_to_device(at(data_, offset), src, n);
}

void ConnBuffer::read_to_gpu(void* dst, std::size_t n, std::size_t offset, const Memory* gpu) const {
  check_range(offset, n);
  const Memory& peer = device_peer(gpu, "read_to_gpu");
  check_pointer(dst, n, "read_to_gpu", "destination");
  if (n == 0) return;
  if (type() == MemoryType::CPU) peer.copy_host_to_device(dst, at(data_, offset), n);
  else memory_->copy_device_to_device(dst, at(data_, offset), n);
}

void ConnBuffer::copy_within(std::size_t dst_offset, std::size_t src_offset, std::size_t n) {
  check_range(dst_offset, n);
  check_range(src_offset, n);
  if (n == 0 || dst_offset == src_offset) return;
  const std::size_t distance = dst_offset > src_offset ? dst_offset - src_offset : src_offset - dst_offset;
  if (type() == MemoryType::CPU || distance >= n) {
    memory_->copy_device_to_device(at(data_, dst_offset), at(data_, src_offset), n);
    return;
  }
  // Overlapping GPU ranges: copy through a scratch chunk, front to back when moving down and back
  // to front when moving up, so no source byte is overwritten before it has been read.
  const std::size_t chunk = std::min(n, overlap_chunk);
  Memory& m = *memory_;
  void* scratch = m.allocate(chunk);
  struct Release {
    Memory& m;
    void* p;
    std::size_t size;
    ~Release() { m.free(p, size); }
  } release{m, scratch, chunk};
  for (std::size_t done = 0; done < n;) {
    const std::size_t len = std::min(chunk, n - done);
    const std::size_t pos = dst_offset < src_offset ? done : n - done - len;
    m.copy_device_to_device(scratch, at(data_, src_offset + pos), len);
    m.copy_device_to_device(at(data_, dst_offset + pos), scratch, len);
    done += len;
  }
}

}  // namespace hmc
