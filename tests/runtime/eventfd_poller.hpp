#pragma once
// A Poller backed by a real eventfd, for the runtime tests: producers add work and (normally)
// signal the fd, like a UCX worker whose efd fires when completions arrive after ucp_worker_arm.
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

#include "hmc/runtime/poller.hpp"

namespace hmc::runtime::test {

class EventfdPoller final : public Poller {
 public:
  EventfdPoller() : efd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~EventfdPoller() override { ::close(efd_); }

  bool progress() override {
    ++progress_calls;
    int w = work.load();
    while (w > 0 && !work.compare_exchange_weak(w, w - 1)) {
    }
    if (w <= 0) return false;
    ++completed;
    return true;
  }
  ArmResult try_arm() override {
    ++arm_calls;
    if (busy_arms > 0) {
      --busy_arms;
      return ArmResult::busy;
    }
    std::uint64_t drained = 0;
    while (::read(efd_, &drained, sizeof drained) > 0) {
    }
    return work.load() > 0 ? ArmResult::busy : ArmResult::armed;
  }
  int fd() const override { return efd_; }
  bool has_pending() const override { return pending.load(); }

  void add_work(int n, bool signal) {
    work += n;
    if (signal) {
      std::uint64_t one = 1;
      EXPECT_EQ(::write(efd_, &one, sizeof one), static_cast<ssize_t>(sizeof one));
    }
  }

  std::atomic<int> work{0};
  std::atomic<int> completed{0};
  std::atomic<long> progress_calls{0};
  std::atomic<long> arm_calls{0};
  std::atomic<int> busy_arms{0};
  std::atomic<bool> pending{false};

 private:
  int efd_;
};

}  // namespace hmc::runtime::test
