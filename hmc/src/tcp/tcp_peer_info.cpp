#include "tcp/tcp_peer_info.hpp"

#include "wire/wire_reader.hpp"
#include "wire/wire_writer.hpp"

namespace hmc::detail {
namespace {

constexpr std::uint32_t kInfoMagic = 0x31504354;  // "TCP1"
constexpr std::size_t kMaxText = 256;

}  // namespace

std::vector<std::byte> TcpPeerInfo::encode() const {
  WireWriter w;
  w.u32(kInfoMagic);
  w.u32(rank);
  w.u64(buffer_size);
  w.blob(address_ip.data(), address_ip.size());
  w.u16(data_port);
  w.blob(listen_ip.data(), listen_ip.size());
  w.u16(listen_port);
  w.bytes(secret.data(), secret.size());
  return w.take();
}

std::string TcpPeerInfo::decode(std::span<const std::byte> bytes, TcpPeerInfo& out) {
  WireReader r(bytes);
  std::uint32_t magic = 0;
  if (!r.u32(magic) || magic != kInfoMagic) return "not a tcp peer-info message";
  if (!r.u32(out.rank) || !r.u64(out.buffer_size) || !r.blob(out.address_ip, kMaxText) || !r.u16(out.data_port) ||
      !r.blob(out.listen_ip, kMaxText) || !r.u16(out.listen_port) || !r.bytes(out.secret.data(), out.secret.size()))
    return "truncated tcp peer-info message (or an address over its limit)";
  if (!r.done()) return "trailing bytes after the tcp peer-info message";
  if (out.listen_port != 0 && out.listen_ip.empty()) return "tcp peer-info with a listen port but no address";
  return {};
}

}  // namespace hmc::detail
