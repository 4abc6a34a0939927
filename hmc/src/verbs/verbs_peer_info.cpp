#include "verbs/verbs_peer_info.hpp"

#include <infiniband/verbs.h>

#include <cstring>

#include "detail/byte_order.hpp"

namespace hmc::detail {
namespace {

constexpr std::uint32_t kInfoMagic = 0x31425256;  // "VRB1"
constexpr std::size_t kMaxText = 1024;

void put16(std::vector<std::byte>& o, std::uint16_t v) { o.resize(o.size() + 2), store_le16(o.data() + o.size() - 2, v); }
void put32(std::vector<std::byte>& o, std::uint32_t v) { o.resize(o.size() + 4), store_le32(o.data() + o.size() - 4, v); }
void put64(std::vector<std::byte>& o, std::uint64_t v) { o.resize(o.size() + 8), store_le64(o.data() + o.size() - 8, v); }
void put_bytes(std::vector<std::byte>& o, const void* p, std::size_t n) {
  o.resize(o.size() + n);
  if (n != 0) std::memcpy(o.data() + o.size() - n, p, n);
}

class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  bool u16(std::uint16_t& v) { return take(2) && (v = load_le16(at_), true); }
  bool u32(std::uint32_t& v) { return take(4) && (v = load_le32(at_), true); }
  bool u64(std::uint64_t& v) { return take(8) && (v = load_le64(at_), true); }
  bool bytes(void* out, std::size_t n) { return take(n) && (n == 0 || std::memcpy(out, at_, n)); }
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

}  // namespace

std::vector<std::byte> VerbsPeerInfo::encode() const {
  std::vector<std::byte> o;
  put32(o, kInfoMagic);
  put32(o, rank);
  put64(o, buffer_base);
  put64(o, buffer_size);
  put32(o, rkey);
  put32(o, memory_type);
  put32(o, static_cast<std::uint32_t>(address_ip.size()));
  put_bytes(o, address_ip.data(), address_ip.size());
  put16(o, data_port);
  put16(o, lid);
  put_bytes(o, gid.data(), gid.size());
  put_bytes(o, &mtu, 1);
  put32(o, psn);
  put32(o, static_cast<std::uint32_t>(qp_nums.size()));
  for (std::uint32_t q : qp_nums) put32(o, q);
  return o;
}

std::string VerbsPeerInfo::decode(std::span<const std::byte> bytes, VerbsPeerInfo& out) {
  Reader r(bytes);
  std::uint32_t magic = 0, ip_len = 0, n_qps = 0;
  if (!r.u32(magic) || magic != kInfoMagic) return "not a verbs peer-info message (is the peer using ConnType::UCX?)";
  if (!r.u32(out.rank) || !r.u64(out.buffer_base) || !r.u64(out.buffer_size) || !r.u32(out.rkey) ||
      !r.u32(out.memory_type) || !r.u32(ip_len) || ip_len > kMaxText)
    return "truncated verbs peer-info message (or an address over its limit)";
  out.address_ip.resize(ip_len);
  if (!r.bytes(out.address_ip.data(), ip_len) || !r.u16(out.data_port) || !r.u16(out.lid) ||
      !r.bytes(out.gid.data(), out.gid.size()) || !r.bytes(&out.mtu, 1) || !r.u32(out.psn) || !r.u32(n_qps))
    return "truncated verbs peer-info message";
  if (n_qps == 0 || n_qps > kMaxQps)
    return "verbs peer-info with " + std::to_string(n_qps) + " QPs (1 to " + std::to_string(kMaxQps) + " allowed)";
  out.qp_nums.resize(n_qps);
  for (auto& q : out.qp_nums)
    if (!r.u32(q)) return "truncated verbs peer-info message";
  if (!r.done()) return "trailing bytes after the verbs peer-info message";
  if (out.buffer_base + out.buffer_size < out.buffer_base) return "verbs peer-info buffer wraps the address space";
  if (out.mtu < IBV_MTU_256 || out.mtu > IBV_MTU_4096) return "verbs peer-info with an invalid path MTU";
  return {};
}

}  // namespace hmc::detail
