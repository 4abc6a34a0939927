#include "hmc/runtime/event_loop.hpp"

#include "hmc/runtime/log.hpp"
#include "poller_driver.hpp"

namespace hmc::runtime {

namespace detail {
bool asio_uring_cancel_fix_applied() noexcept;
}

EventLoop::EventLoop(EventLoopOptions options) : options_(options), work_(asio::make_work_guard(io_)) {
  log().debug("event loop created: reactor={} uring_cancel_fix={} progress_mode={}", backend(), uring_cancel_fix(),
              to_string(options_.mode));
}

EventLoop::~EventLoop() {
  stop();
  // Let the completions of operations cancelled by close/shutdown run before the context dies:
  // Asio 1.26's io_uring backend destroys abandoned handlers after the services their I/O objects
  // use, so a handler owning a socket or timer would touch a destroyed service (seen under ASan).
  io_.restart();
  loop_thread_id_.store(std::this_thread::get_id());
  io_.run_for(std::chrono::milliseconds(200));
  loop_thread_id_.store(std::thread::id{});
}

void EventLoop::start() {
  if (thread_.joinable()) return;
  running_.store(true);
  thread_ = std::thread([this] { run(); });
}

void EventLoop::run() {
  running_.store(true);
  loop_thread_id_.store(std::this_thread::get_id());
  io_.run();
  loop_thread_id_.store(std::thread::id{});
  running_.store(false);
}

void EventLoop::stop() {
  work_.reset();
  io_.stop();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

bool EventLoop::in_loop_thread() const noexcept { return loop_thread_id_.load() == std::this_thread::get_id(); }

PollerHandle EventLoop::attach(Poller& poller) {
  auto driver = std::make_shared<detail::PollerDriver>(io_, poller, options_);
  driver->start();
  return PollerHandle(std::move(driver));
}

std::string_view EventLoop::backend() noexcept {
#if defined(BOOST_ASIO_HAS_IO_URING) && defined(BOOST_ASIO_DISABLE_EPOLL)
  return "io_uring";
#else
  return "epoll";
#endif
}

bool EventLoop::uring_cancel_fix() noexcept { return detail::asio_uring_cancel_fix_applied(); }

}  // namespace hmc::runtime
