#include "hmc/error.hpp"

namespace hmc {

std::exception_ptr make_error(const boost::system::error_code& ec, const std::string& context) {
  const Status s = status_of(ec);
  // HMC's own words for mapped codes ("timed out", "peer lost"); the system's text otherwise.
  const std::string detail = s == Status::ERROR ? ec.message() : std::string(to_string(s));
  const std::string what = context.empty() ? detail : context + ": " + detail;
  switch (s) {
    case Status::SUCCESS: return nullptr;
    case Status::TIMEOUT: return std::make_exception_ptr(TimeoutError(what));
    case Status::NOT_FOUND: return std::make_exception_ptr(NotFoundError(what));
    case Status::UNSUPPORT: return std::make_exception_ptr(UnsupportedError(what));
    case Status::INVALID_CONFIG: return std::make_exception_ptr(InvalidConfigError(what));
    case Status::INVALID_ARGUMENT: return std::make_exception_ptr(InvalidArgumentError(what));
    case Status::OUT_OF_RANGE: return std::make_exception_ptr(OutOfRangeError(what));
    case Status::NOT_CONNECTED: return std::make_exception_ptr(NotConnectedError(what));
    case Status::PEER_LOST: return std::make_exception_ptr(PeerLostError(what));
    case Status::PROTOCOL_ERROR: return std::make_exception_ptr(ProtocolError(what));
    case Status::CANCELLED: return std::make_exception_ptr(CancelledError(what));
    case Status::CLOSED: return std::make_exception_ptr(ClosedError(what));
    case Status::AUTH_FAILED: return std::make_exception_ptr(AuthenticationError(what));
    case Status::ERROR: break;
  }
  return std::make_exception_ptr(Error(Status::ERROR, what));
}

std::string_view error_name(Status s) noexcept {
  switch (s) {
    case Status::TIMEOUT: return "TimeoutError";
    case Status::NOT_FOUND: return "NotFoundError";
    case Status::UNSUPPORT: return "UnsupportedError";
    case Status::INVALID_CONFIG: return "InvalidConfigError";
    case Status::INVALID_ARGUMENT: return "InvalidArgumentError";
    case Status::OUT_OF_RANGE: return "OutOfRangeError";
    case Status::NOT_CONNECTED: return "NotConnectedError";
    case Status::PEER_LOST: return "PeerLostError";
    case Status::PROTOCOL_ERROR: return "ProtocolError";
    case Status::CANCELLED: return "CancelledError";
    case Status::CLOSED: return "ClosedError";
    case Status::AUTH_FAILED: return "AuthenticationError";
    case Status::SUCCESS:
    case Status::ERROR: break;
  }
  return "Error";
}

void throw_if(const boost::system::error_code& ec, const std::string& context) {
  if (ec) std::rethrow_exception(make_error(ec, context));
}

}  // namespace hmc
