#pragma once
// A long watch (a store key, a peer's messages) waits again after a timeout and ends on any other error.
#include <exception>
#include <optional>
#include <string>

#include "hmc/error.hpp"

namespace hmc::detail {

// Empty when e is a timeout (watch again); otherwise why the watch ends.
inline std::optional<std::string> watch_ended(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const TimeoutError&) {
    return std::nullopt;
  } catch (const std::exception& err) {
    return err.what();
  } catch (...) {
    return "an unknown error";
  }
}

}  // namespace hmc::detail
