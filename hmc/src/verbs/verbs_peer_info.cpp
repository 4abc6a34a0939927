#include "verbs/verbs_peer_info.hpp"

#include <infiniband/verbs.h>

#include "wire/wire_reader.hpp"
#include "wire/wire_writer.hpp"

namespace hmc::detail {
namespace {

constexpr std::uint32_t kInfoMagic = 0x31425256;  // "VRB1"
constexpr std::size_t kMaxText = 1024;

}  // namespace

std::vector<std::byte> VerbsPeerInfo::encode() const {
  WireWriter w;
  w.u32(kInfoMagic);
  w.u32(rank);
  w.u64(buffer_base);
  w.u64(buffer_size);
  w.u32(rkey);
  w.u32(memory_type);
  w.blob(address_ip.data(), address_ip.size());
  w.u16(data_port);
  w.u16(lid);
  w.bytes(gid.data(), gid.size());
  w.bytes(&mtu, 1);
  w.u32(psn);
  w.u32(static_cast<std::uint32_t>(qp_nums.size()));
  for (std::uint32_t q : qp_nums) w.u32(q);
  return w.take();
}

std::string VerbsPeerInfo::decode(std::span<const std::byte> bytes, VerbsPeerInfo& out) {
  WireReader r(bytes);
  std::uint32_t magic = 0, n_qps = 0;
  if (!r.u32(magic) || magic != kInfoMagic) return "not a verbs peer-info message (is the peer using ConnType::UCX?)";
  if (!r.u32(out.rank) || !r.u64(out.buffer_base) || !r.u64(out.buffer_size) || !r.u32(out.rkey) ||
      !r.u32(out.memory_type) || !r.blob(out.address_ip, kMaxText))
    return "truncated verbs peer-info message (or an address over its limit)";
  if (!r.u16(out.data_port) || !r.u16(out.lid) || !r.bytes(out.gid.data(), out.gid.size()) || !r.bytes(&out.mtu, 1) ||
      !r.u32(out.psn) || !r.u32(n_qps))
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
