#pragma once
// Drives a caller-driven loop from an outside selector (asyncio's): a wakeup fd that is readable
// while the loop has work, and poll(), which runs what is ready without ever blocking.
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "driver_seat.hpp"
#include "hmc/runtime/asio.hpp"
#include "loop_wakeup.hpp"
#include "poller_driver.hpp"

namespace hmc::runtime::detail {

class SelectorDriver {
 public:
  SelectorDriver(asio::io_context& io, DriverSeat& seat, LoopWakeup& wakeup, int reactor_fd)
      : io_(io), seat_(seat), wakeup_(wakeup), reactor_fd_(reactor_fd) {}
  ~SelectorDriver();
  SelectorDriver(const SelectorDriver&) = delete;
  SelectorDriver& operator=(const SelectorDriver&) = delete;

  // An epoll fd over the reactor's fd and the wakeup eventfd; made on the first call.
  int wakeup_fd();
  // EventLoop::poll: runs at most a batch of ready handlers and cycles every poller once. `again`
  // (when given) is set instead of signalling the wakeup fd when another poll() is due at once.
  std::size_t poll(const std::function<bool()>& stop, bool* again);
  // A poller whose cycles poll() holds to one per call. Loop thread only.
  void add(std::weak_ptr<PollerDriver> poller) { pollers_.push_back(std::move(poller)); }

 private:
  bool release_pollers();

  asio::io_context& io_;
  DriverSeat& seat_;
  LoopWakeup& wakeup_;
  const int reactor_fd_;  // the io_uring ring (or epoll set) Asio sleeps in
  std::mutex mutex_;      // epoll_fd_'s creation
  int epoll_fd_ = -1;     // the wakeup fd: reactor_fd_ + the wakeup's eventfd
  std::vector<std::weak_ptr<PollerDriver>> pollers_;
};

}  // namespace hmc::runtime::detail
