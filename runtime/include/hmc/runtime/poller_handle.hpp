#pragma once
// Owner's handle on a poller attached to an EventLoop: kick after submitting, detach when done.
#include <memory>

namespace hmc::runtime {

namespace detail {
class PollerDriver;
}

class PollerHandle {
 public:
  PollerHandle() = default;
  explicit PollerHandle(std::shared_ptr<detail::PollerDriver> driver) noexcept;
  ~PollerHandle();  // detaches
  PollerHandle(PollerHandle&&) noexcept;
  PollerHandle& operator=(PollerHandle&&) noexcept;
  PollerHandle(const PollerHandle&) = delete;
  PollerHandle& operator=(const PollerHandle&) = delete;

  // Marks the poller dirty after a submission on the loop thread: progress-then-arm runs again
  // before the loop sleeps (a submission after arming may not signal the fd).
  void kick();

  // Stops driving the poller and releases (never closes) its fd. Call on the loop thread.
  void detach();

  bool attached() const noexcept { return driver_ != nullptr; }

 private:
  std::shared_ptr<detail::PollerDriver> driver_;
};

}  // namespace hmc::runtime
