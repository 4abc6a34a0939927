#pragma once
// What two sessions exchange over the (authenticated) control channel to connect their RC QPs and
// reach each other's buffer with RDMA. A pure function of its bytes: fuzzable, every field bounded.
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace hmc::detail {

struct VerbsPeerInfo {
  static constexpr std::size_t kMaxQps = 64;  // num_chs beyond this is refused, never a fixed array overrun

  std::uint32_t rank = 0;
  std::uint64_t buffer_base = 0;  // the peer's virtual address of its ConnBuffer
  std::uint64_t buffer_size = 0;
  std::uint32_t rkey = 0;         // of the MR covering the whole buffer
  std::uint32_t memory_type = 0;  // hmc::MemoryType
  std::string address_ip;
  std::uint16_t data_port = 0;
  std::uint16_t lid = 0;
  std::array<std::uint8_t, 16> gid{};
  std::uint8_t mtu = 0;                // ibv_mtu
  std::vector<std::uint32_t> qp_nums;  // one per channel, in channel order
  std::uint32_t psn = 0;               // the first packet sequence number of every one of them

  std::vector<std::byte> encode() const;
  // Empty string on success, else what is wrong with the bytes.
  static std::string decode(std::span<const std::byte> bytes, VerbsPeerInfo& out);
};

}  // namespace hmc::detail
