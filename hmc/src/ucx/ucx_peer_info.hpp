#pragma once
// What two sessions exchange over the control channel to reach each other's buffer with UCX.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace hmc::detail {

struct UcxPeerInfo {
  std::uint32_t rank = 0;
  std::uint64_t buffer_base = 0;  // the peer's virtual address of its ConnBuffer
  std::uint64_t buffer_size = 0;
  std::uint32_t memory_type = 0;  // hmc::MemoryType
  std::string address_ip;         // the (ip, data_port) the reference API names this peer by
  std::uint16_t data_port = 0;
  std::string host_id;  // same value on the same machine and boot: such peers can share memory
  std::vector<std::byte> worker_address;
  std::vector<std::byte> rkey;

  std::vector<std::byte> encode() const;
  // Empty string on success, else what is wrong with the bytes.
  static std::string decode(std::span<const std::byte> bytes, UcxPeerInfo& out);

  // This machine's host_id (the kernel's boot id).
  static std::string local_host_id();
};

}  // namespace hmc::detail
