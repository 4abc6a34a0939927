#pragma once
// What two sessions exchange over the control channel to reach each other's buffer with UCX. The
// codec is a pure function of its bytes (no UCX): fuzzable, and every field is bounded; worker
// addresses are walked (ucx_worker_address.hpp) before anything hands them to UCX.
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
  std::string shm_domain;                     // equal on both sides: the two can share memory (local_shm_domain)
  std::vector<std::byte> worker_address;      // every transport of the peer's worker
  std::vector<std::byte> net_worker_address;  // network transports only (may be empty)
  std::vector<std::byte> rkey;
  std::uint64_t fast_token = 0;  // the receiver puts it in every fast-path message it sends the peer

  std::vector<std::byte> encode() const;
  // Empty string on success, else what is wrong with the bytes.
  static std::string decode(std::span<const std::byte> bytes, UcxPeerInfo& out);

  // This process's shared-memory domain: the kernel's boot id, the effective uid and the network,
  // IPC, mount and PID namespaces. Processes with equal domains can map each other's UCX shared
  // memory and reach each other's abstract Unix sockets; empty when /proc cannot tell.
  static std::string local_shm_domain();
};

}  // namespace hmc::detail
