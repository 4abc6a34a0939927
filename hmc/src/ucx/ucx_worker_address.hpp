#pragma once
// A peer's UCX worker address, checked before UCX sees it: UCX 1.13's ucp_address_unpack takes no
// length and trusts every byte (a malformed address aborts the process or reads past the buffer).
#include <cstddef>
#include <span>
#include <string>

namespace hmc::detail {

// Bytes UCX may read past a checked address (transports parse device and iface addresses by their
// own formats): whoever hands an address to UCX appends this many zero bytes.
inline constexpr std::size_t kWorkerAddressPadding = 256;

// Walks a packed worker address (version 1, non-unified mode: what UcxContext pins) with bounds,
// and the parts of self, posix, cma and tcp addresses UCX would trust. Empty string when UCX can
// unpack it safely, else what is wrong with it.
std::string check_worker_address(std::span<const std::byte> address);

// A well-formed address that names at least one transport (a worker whose transports were all
// filtered out, e.g. a network-only address without network transports, names none).
bool address_has_transports(std::span<const std::byte> address);

}  // namespace hmc::detail
