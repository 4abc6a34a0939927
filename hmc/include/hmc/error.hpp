#pragma once
// The HMC exception hierarchy. Error codes become exceptions in exactly one place: make_error().
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>

#include "hmc/status.hpp"

namespace hmc {

class Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& what) : std::runtime_error(what), status_(status) {}
  Status status() const noexcept { return status_; }

 private:
  Status status_;
};

#define HMC_DEFINE_ERROR(Name, Code)                                      \
  class Name : public Error {                                             \
   public:                                                                \
    explicit Name(const std::string& what) : Error(Status::Code, what) {} \
  }

HMC_DEFINE_ERROR(TimeoutError, TIMEOUT);
HMC_DEFINE_ERROR(NotFoundError, NOT_FOUND);
HMC_DEFINE_ERROR(UnsupportedError, UNSUPPORT);
HMC_DEFINE_ERROR(InvalidConfigError, INVALID_CONFIG);
HMC_DEFINE_ERROR(InvalidArgumentError, INVALID_ARGUMENT);
HMC_DEFINE_ERROR(OutOfRangeError, OUT_OF_RANGE);

class NotConnectedError : public Error {
 public:
  explicit NotConnectedError(const std::string& what) : Error(Status::NOT_CONNECTED, what) {}

 protected:
  NotConnectedError(Status status, const std::string& what) : Error(status, what) {}
};

// A peer that was connected and went away (status PEER_LOST); being no longer connected, it is
// caught by `catch (const NotConnectedError&)` too.
class PeerLostError : public NotConnectedError {
 public:
  explicit PeerLostError(const std::string& what) : NotConnectedError(Status::PEER_LOST, what) {}
};

HMC_DEFINE_ERROR(ProtocolError, PROTOCOL_ERROR);
HMC_DEFINE_ERROR(CancelledError, CANCELLED);
HMC_DEFINE_ERROR(ClosedError, CLOSED);
HMC_DEFINE_ERROR(AuthenticationError, AUTH_FAILED);

#undef HMC_DEFINE_ERROR

// The one conversion from an error code (HMC's, Asio's or errno) to the typed exception.
std::exception_ptr make_error(const boost::system::error_code& ec, const std::string& context);

// Throws the typed exception for ec; does nothing when ec is success.
void throw_if(const boost::system::error_code& ec, const std::string& context);

// The class a status becomes, as C++ and Python name it ("PeerLostError"; "Error" for ERROR).
std::string_view error_name(Status s) noexcept;

}  // namespace hmc
