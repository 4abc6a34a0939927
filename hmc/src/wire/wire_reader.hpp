#pragma once
// Reads what WireWriter wrote, bounds-checked: every read of a peer's bytes fails instead of overrunning.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "wire/byte_order.hpp"

namespace hmc::detail {

class WireReader {
 public:
  explicit WireReader(std::span<const std::byte> in) : in_(in) {}
  bool u16(std::uint16_t& v) { return take(2) && (v = load_le16(at_), true); }
  bool u32(std::uint32_t& v) { return take(4) && (v = load_le32(at_), true); }
  bool u64(std::uint64_t& v) { return take(8) && (v = load_le64(at_), true); }
  bool bytes(void* out, std::size_t n) { return take(n) && (n == 0 || std::memcpy(out, at_, n)); }
  // A length-prefixed blob of at most max bytes into a resizable byte container (string, vector).
  template <class Out>
  bool blob(Out& out, std::size_t max) {
    std::uint32_t n = 0;
    if (!u32(n) || n > max || !take(n)) return false;
    out.resize(n);
    if (n != 0) std::memcpy(out.data(), at_, n);
    return true;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  bool take(std::size_t n) {
    if (in_.size() - pos_ < n) return false;
    at_ = in_.data() + pos_;
    pos_ += n;
    return true;
  }
  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
  const std::byte* at_ = nullptr;
};

}  // namespace hmc::detail
