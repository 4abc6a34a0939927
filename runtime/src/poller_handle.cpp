#include "hmc/runtime/poller_handle.hpp"

#include "poller_driver.hpp"

namespace hmc::runtime {

PollerHandle::PollerHandle(std::shared_ptr<detail::PollerDriver> driver) noexcept : driver_(std::move(driver)) {}

PollerHandle::~PollerHandle() { detach(); }

PollerHandle::PollerHandle(PollerHandle&& other) noexcept = default;

PollerHandle& PollerHandle::operator=(PollerHandle&& other) noexcept {
  if (this != &other) {
    detach();
    driver_ = std::move(other.driver_);
  }
  return *this;
}

void PollerHandle::kick() {
  if (driver_) driver_->kick();
}

void PollerHandle::detach() {
  if (driver_) {
    driver_->stop();
    driver_.reset();
  }
}

}  // namespace hmc::runtime
