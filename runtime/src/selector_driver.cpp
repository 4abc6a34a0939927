#include "selector_driver.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>
#include <system_error>

namespace hmc::runtime::detail {

namespace {
// poll() runs at most this many handlers: a poller that spins (poll, adaptive) re-posts itself.
constexpr std::size_t kPollBatch = 256;
}  // namespace

SelectorDriver::~SelectorDriver() {
  if (epoll_fd_ < 0) return;
  count_wakeup_fds(-1);
  ::close(epoll_fd_);  // the eventfd closes with its last LoopWakeup holder
}

int SelectorDriver::wakeup_fd() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (epoll_fd_ >= 0) return epoll_fd_;
  if (reactor_fd_ < 0) throw std::runtime_error("EventLoop::wakeup_fd: the reactor's fd was not recorded");
  const int efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  const int ep = efd < 0 ? -1 : ::epoll_create1(EPOLL_CLOEXEC);
  auto add_fd = [ep](int fd) {
    ::epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    return ::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0;
  };
  if (ep < 0 || !add_fd(reactor_fd_) || !add_fd(efd)) {
    const int err = errno;
    if (efd >= 0) ::close(efd);
    if (ep >= 0) ::close(ep);
    throw std::system_error(err, std::generic_category(), "EventLoop::wakeup_fd");
  }
  epoll_fd_ = ep;
  wakeup_.efd.store(efd, std::memory_order_release);
  count_wakeup_fds(+1);
  return epoll_fd_;
}

std::size_t SelectorDriver::poll(const std::function<bool()>& stop, bool* again) {
  // Refused while another thread drives: the wakeup fd is readable again only when that driver
  // leaves (it signals then), as an outside selector polling on it meanwhile would spin.
  if (!seat_.try_take(true)) return 0;
  std::size_t n = 0;
  try {
    wakeup_.consume();
    for (auto it = pollers_.begin(); it != pollers_.end();) {
      if (auto p = it->lock()) {
        p->hold();  // each poller cycles once per poll(): a spin goes on in the caller's next poll()
        p->poke();
        ++it;
      } else {
        it = pollers_.erase(it);
      }
    }
    bool stopped_early = false;
    while (n < kPollBatch && io_.poll_one() != 0) {
      ++n;
      seat_.wake_done_waiters();
      if (stop && stop()) {
        stopped_early = true;
        break;
      }
    }
    const bool spinning = release_pollers();
    // More may be ready, or a poller spins: the wakeup fd stays readable (or the caller is told).
    if (n == kPollBatch || stopped_early || spinning) again != nullptr ? void(*again = true) : wakeup_.signal();
  } catch (...) {
    release_pollers();
    seat_.leave();
    throw;
  }
  seat_.leave();
  return n;
}

// Ends poll()'s hold: a poller that wanted to cycle again is posted. True when one was.
bool SelectorDriver::release_pollers() {
  bool any = false;
  for (const auto& weak : pollers_) {
    if (auto p = weak.lock()) any = p->release() || any;
  }
  return any;
}

}  // namespace hmc::runtime::detail
