// The checks an operation passes before anything is sent.
#include "session/session_impl.hpp"

#include "hmc/error.hpp"

namespace hmc::detail {

// GCC 12 warns falsely on the string concatenations below once they are inlined here (GCC PR 105329).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
#pragma GCC diagnostic ignored "-Wstringop-overflow"
// Checks an operation before anything is sent; the exception says what to fix.
std::exception_ptr SessionImpl::validate(bool is_put, std::uint32_t rank, std::uint64_t region,
                                         std::span<const Segment> segs, std::size_t chunk, std::size_t window,
                                         bool pipeline) const {
  const char* op = is_put ? "put" : "get";
  auto fail = [&](auto error) { return std::make_exception_ptr(error); };
  if (closed) return fail(ClosedError(std::string(op) + " on a closed session"));
  // A peer whose wireup is still going on takes operations (UCX queues them): a put issued
  // after a ctrl_recv from that peer must find it, and that message may overtake our wireup.
  const PeerRecord* peer = transport ? transport->peer(rank) : nullptr;
  if (peer == nullptr) {
    if (auto l = lost.find(rank); l != lost.end())
      return fail(PeerLostError(std::string(op) + ": " + lost_text(rank, l->second)));
    return fail(NotConnectedError(std::string(op) + ": no data connection to rank " + std::to_string(rank) +
                                  " (connect() to it, or wait_peer() for a client)"));
  }
  if (segs.empty()) return fail(InvalidArgumentError(std::string(op) + ": empty segment list"));
  if (region == kForeignRegion)
    return fail(InvalidArgumentError(std::string(op) + ": the registered memory belongs to another session"));
  const std::size_t local_size = transport->region_size(region);
  if (local_size == 0) return fail(InvalidArgumentError(std::string(op) + ": the registered memory was released"));
  if (pipeline && (chunk == 0 || window == 0))
    return fail(InvalidArgumentError(std::string(op) + " pipeline: chunk and max_inflight must be > 0"));
  for (const Segment& s : segs) {
    if (s.size == 0) return fail(InvalidArgumentError(std::string(op) + ": size must be > 0"));
    if (s.local_offset > local_size || s.size > local_size - s.local_offset)
      return fail(OutOfRangeError(std::string(op) + ": local range [" + std::to_string(s.local_offset) + ", +" +
                                  std::to_string(s.size) + ") is outside the " +
                                  (region == 0 ? "session buffer" : "registered memory") + " of " +
                                  std::to_string(local_size) + " bytes" +
                                  (region == 0 ? " (a larger buffer_size, or register the memory to move)" : "")));
    if (s.remote_offset > peer->buffer_size || s.size > peer->buffer_size - s.remote_offset)
      return fail(OutOfRangeError(std::string(op) + ": remote range [" + std::to_string(s.remote_offset) + ", +" +
                                  std::to_string(s.size) + ") is outside rank " + std::to_string(rank) +
                                  "'s buffer of " + std::to_string(peer->buffer_size) + " bytes"));
  }
  return nullptr;
}
#pragma GCC diagnostic pop

}  // namespace hmc::detail
