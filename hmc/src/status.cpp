#include "hmc/status.hpp"

#include <boost/asio/error.hpp>
#include <string>

namespace hmc {
namespace {

class HmcCategory final : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "hmc"; }
  std::string message(int code) const override { return std::string(to_string(static_cast<Status>(code))); }
};

}  // namespace

std::string_view to_string(Status s) noexcept {
  switch (s) {
    case Status::SUCCESS: return "success";
    case Status::ERROR: return "error";
    case Status::UNSUPPORT: return "unsupported in this build";
    case Status::INVALID_CONFIG: return "invalid configuration";
    case Status::TIMEOUT: return "timed out";
    case Status::NOT_FOUND: return "not found";
    case Status::INVALID_ARGUMENT: return "invalid argument";
    case Status::OUT_OF_RANGE: return "out of range";
    case Status::NOT_CONNECTED: return "not connected";
    case Status::PEER_LOST: return "peer lost";
    case Status::PROTOCOL_ERROR: return "protocol error";
    case Status::CANCELLED: return "cancelled";
    case Status::CLOSED: return "closed";
    case Status::AUTH_FAILED: return "authentication failed";
  }
  return "unknown status";
}

const boost::system::error_category& hmc_category() noexcept {
  static const HmcCategory category;
  return category;
}

Status status_of(const boost::system::error_code& ec) noexcept {
  namespace ae = boost::asio::error;
  if (!ec) return Status::SUCCESS;
  if (ec.category() == hmc_category()) return static_cast<Status>(ec.value());
  if (ec == ae::timed_out) return Status::TIMEOUT;
  if (ec == ae::operation_aborted) return Status::CANCELLED;
  if (ec == ae::connection_refused || ec == ae::host_unreachable || ec == ae::network_unreachable ||
      ec == ae::not_connected || ec == ae::address_in_use)
    return Status::NOT_CONNECTED;
  if (ec == ae::eof || ec == ae::connection_reset || ec == ae::broken_pipe || ec == ae::connection_aborted)
    return Status::PEER_LOST;
  if (ec == ae::operation_not_supported) return Status::UNSUPPORT;
  if (ec == ae::invalid_argument) return Status::INVALID_ARGUMENT;
  if (ec == ae::not_found || ec == ae::host_not_found) return Status::NOT_FOUND;
  return Status::ERROR;
}

}  // namespace hmc
