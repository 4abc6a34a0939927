#pragma once
// What two sessions exchange over the control channel to reach each other over HMC's checked TCP
// data path. The codec is a pure function of its bytes: fuzzable, every field bounded.
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace hmc::detail {

struct TcpPeerInfo {
  std::uint32_t rank = 0;
  std::uint64_t buffer_size = 0;
  std::string address_ip;  // the (ip, data_port) the reference API names this peer by
  std::uint16_t data_port = 0;
  std::string listen_ip;               // where its data listener accepts (empty with listen_port 0)
  std::uint16_t listen_port = 0;       // 0: it does not listen, so it dials
  std::array<std::byte, 32> secret{};  // given to the receiver only: it proves itself with it

  std::vector<std::byte> encode() const;
  // Empty string on success, else what is wrong with the bytes.
  static std::string decode(std::span<const std::byte> bytes, TcpPeerInfo& out);
};

}  // namespace hmc::detail
