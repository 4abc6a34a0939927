#include "ucx/ucx_peer_info.hpp"

#include <unistd.h>

#include <array>
#include <fstream>

#include "ucx/ucx_worker_address.hpp"
#include "wire/wire_reader.hpp"
#include "wire/wire_writer.hpp"

namespace hmc::detail {
namespace {

constexpr std::uint32_t kInfoMagic = 0x32584355;  // "UCX2"
constexpr std::size_t kMaxBlob = 1u << 20;        // worker addresses and rkeys are far smaller
constexpr std::size_t kMaxText = 1024;            // an IP address, a shared-memory domain

}  // namespace

std::vector<std::byte> UcxPeerInfo::encode() const {
  WireWriter w;
  w.u32(kInfoMagic);
  w.u32(rank);
  w.u64(buffer_base);
  w.u64(buffer_size);
  w.u32(memory_type);
  w.blob(address_ip.data(), address_ip.size());
  w.u16(data_port);
  w.blob(shm_domain.data(), shm_domain.size());
  w.blob(worker_address.data(), worker_address.size());
  w.blob(net_worker_address.data(), net_worker_address.size());
  w.blob(rkey.data(), rkey.size());
  w.u64(fast_token);
  return w.take();
}

std::string UcxPeerInfo::decode(std::span<const std::byte> bytes, UcxPeerInfo& out) {
  WireReader r(bytes);
  std::uint32_t magic = 0;
  if (!r.u32(magic) || magic != kInfoMagic) return "not a UCX peer-info message";
  if (!r.u32(out.rank) || !r.u64(out.buffer_base) || !r.u64(out.buffer_size) || !r.u32(out.memory_type) ||
      !r.blob(out.address_ip, kMaxText) || !r.u16(out.data_port) || !r.blob(out.shm_domain, kMaxText) ||
      !r.blob(out.worker_address, kMaxBlob) || !r.blob(out.net_worker_address, kMaxBlob) ||
      !r.blob(out.rkey, kMaxBlob) || !r.u64(out.fast_token))
    return "truncated UCX peer-info message (or a field over its limit)";
  if (!r.done()) return "trailing bytes after the UCX peer-info message";
  if (out.worker_address.empty()) return "UCX peer-info without a worker address";
  // Here, not at ucp_ep_create: every path that decodes a peer's addresses gets only checked ones.
  if (std::string why = check_worker_address(out.worker_address); !why.empty())
    return "malformed UCX worker address: " + why;
  if (!out.net_worker_address.empty())
    if (std::string why = check_worker_address(out.net_worker_address); !why.empty())
      return "malformed UCX network-only worker address: " + why;
  return {};
}

std::string UcxPeerInfo::local_shm_domain() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string domain;
  std::getline(in, domain);
  if (domain.empty()) return {};
  domain += " uid=" + std::to_string(::geteuid());
  // Namespaces, not the boot id alone: two network namespaces share a kernel but not the abstract
  // Unix sockets UCX's shared-memory transports signal through; IPC/mount/PID decide the mapping.
  for (const char* ns : {"net", "ipc", "mnt", "pid"}) {
    std::array<char, 128> link{};
    std::string path = "/proc/self/ns/";  // appended, not "literal" + ns: GCC 12 -O3 -Wstringop-overflow
    path += ns;
    const ssize_t n = ::readlink(path.c_str(), link.data(), link.size() - 1);
    if (n <= 0) return {};
    domain += ' ';
    domain.append(link.data(), static_cast<std::size_t>(n));
  }
  return domain;
}

}  // namespace hmc::detail
