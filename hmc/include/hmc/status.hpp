#pragma once
// HMC status codes (the reference system's names first) and their boost::system error category.
#include <string_view>

#include <boost/system/error_code.hpp>

namespace hmc {

enum class Status : int {
  SUCCESS = 0,
  ERROR = 1,
  UNSUPPORT = 2,
  INVALID_CONFIG = 3,
  TIMEOUT = 4,
  NOT_FOUND = 5,
  // HMC additions
  INVALID_ARGUMENT = 6,  // bad input caught before anything was sent
  OUT_OF_RANGE = 7,      // offset/size outside a registered buffer
  NOT_CONNECTED = 8,     // no connection to that peer (never was, or refused)
  PEER_LOST = 9,         // the peer disconnected or died
  PROTOCOL_ERROR = 10,   // malformed or unexpected frame
  CANCELLED = 11,        // the waiter cancelled the operation
  CLOSED = 12,           // the session/channel was closed
  AUTH_FAILED = 13,      // the peer could not prove it holds the shared key (or we could not)
};

std::string_view to_string(Status s) noexcept;

const boost::system::error_category& hmc_category() noexcept;

inline boost::system::error_code make_error_code(Status s) noexcept { return {static_cast<int>(s), hmc_category()}; }

// Maps any error code (HMC's, Asio's, errno) to the HMC status a user sees.
Status status_of(const boost::system::error_code& ec) noexcept;

}  // namespace hmc

// Lets a Status convert to boost::system::error_code (Boost's trait, not HMC's API: Doxygen skips it).
// @cond
template <>
struct boost::system::is_error_code_enum<hmc::Status> : std::true_type {};
// @endcond
