#pragma once
// A source of completions that the event loop drives (same contract as Seastar's pollers and UCX's
// progress/arm/wait protocol). All three calls happen on the loop thread only.

namespace hmc::runtime {

enum class ArmResult {
  armed,  // the fd will become readable when new work arrives: the loop may sleep
  busy,   // events arrived while arming: progress again before sleeping
};

class Poller {
 public:
  virtual ~Poller() = default;

  // Processes pending completions; true when it did any work (the loop then calls it again).
  virtual bool progress() = 0;

  // Prepares the fd for sleeping; must be the last call into the source before the loop waits.
  virtual ArmResult try_arm() = 0;

  // The descriptor that becomes readable after a successful arm. The poller keeps ownership.
  virtual int fd() const = 0;

  // True while operations are in flight: the loop then keeps a safety timer against missed wakeups.
  virtual bool has_pending() const = 0;
};

}  // namespace hmc::runtime
