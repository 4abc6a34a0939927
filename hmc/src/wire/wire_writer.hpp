#pragma once
// Appends little-endian fixed-width fields and length-prefixed blobs: the bootstrap messages' encoding.
#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "wire/byte_order.hpp"

namespace hmc::detail {

class WireWriter {
 public:
  void u16(std::uint16_t v) { append<2>(v, store_le16); }
  void u32(std::uint32_t v) { append<4>(v, store_le32); }
  void u64(std::uint64_t v) { append<8>(v, store_le64); }
  // n raw bytes: fixed-size fields (a GID, a one-byte enum).
  void bytes(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    if (n != 0) out_.insert(out_.end(), b, b + n);
  }
  // A u32 length, then the bytes: what WireReader::blob reads back.
  void blob(const void* p, std::size_t n) {
    u32(static_cast<std::uint32_t>(n));
    bytes(p, n);
  }
  std::vector<std::byte> take() { return std::move(out_); }

 private:
  // Encoded on the stack, then appended: GCC 12 at -O3 flags resize() + a write into the new tail
  // as an overflow (-Wstringop-overflow, a false positive).
  template <std::size_t N, class T>
  void append(T v, void (*store)(std::byte*, T)) {
    std::array<std::byte, N> b;
    store(b.data(), v);
    out_.insert(out_.end(), b.begin(), b.end());
  }
  std::vector<std::byte> out_;
};

}  // namespace hmc::detail
