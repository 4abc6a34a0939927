#pragma once
// Appends little-endian fixed-width fields and length-prefixed blobs: the bootstrap messages' encoding.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "detail/byte_order.hpp"

namespace hmc::detail {

class WireWriter {
 public:
  void u16(std::uint16_t v) { store_le16(grow(2), v); }
  void u32(std::uint32_t v) { store_le32(grow(4), v); }
  void u64(std::uint64_t v) { store_le64(grow(8), v); }
  // n raw bytes: fixed-size fields (a GID, a one-byte enum).
  void bytes(const void* p, std::size_t n) {
    std::byte* at = grow(n);
    if (n != 0) std::memcpy(at, p, n);
  }
  // A u32 length, then the bytes: what WireReader::blob reads back.
  void blob(const void* p, std::size_t n) {
    u32(static_cast<std::uint32_t>(n));
    bytes(p, n);
  }
  std::vector<std::byte> take() { return std::move(out_); }

 private:
  std::byte* grow(std::size_t n) {
    out_.resize(out_.size() + n);
    return out_.data() + out_.size() - n;
  }
  std::vector<std::byte> out_;
};

}  // namespace hmc::detail
