// libFuzzer target: the verbs transport's bootstrap message (VerbsPeerInfo, "VRB1"), which a peer
// sends over the control channel to connect its RC QPs and expose its buffer.
// Input: the message itself.
// Checks: no crash or sanitizer report; what decodes keeps every bound the transport relies on
// (1..kMaxQps QPs, a valid path MTU, a buffer that does not wrap) and re-encodes to exactly its
// bytes (a decoder that accepted trailing or malformed bytes, or read past a field, would differ).
#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "verbs/verbs_peer_info.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  hmc::detail::VerbsPeerInfo info;
  if (!hmc::detail::VerbsPeerInfo::decode(bytes, info).empty()) return 0;
  if (info.qp_nums.empty() || info.qp_nums.size() > hmc::detail::VerbsPeerInfo::kMaxQps) std::abort();
  if (info.mtu < IBV_MTU_256 || info.mtu > IBV_MTU_4096) std::abort();
  if (info.buffer_base + info.buffer_size < info.buffer_base) std::abort();
  const std::vector<std::byte> again = info.encode();
  if (again.size() != size || std::memcmp(again.data(), data, size) != 0) std::abort();
  return 0;
}
