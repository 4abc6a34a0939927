// The one translation unit that compiles Asio's implementation (BOOST_ASIO_SEPARATE_COMPILATION).
//
// Asio 1.26 (Boost 1.81) takes io_uring SQEs for cancel requests without setting user_data. From
// liburing 2.2 on, io_uring_prep_* no longer clears user_data, so a cancel completion carries the
// stale pointer of the slot's previous operation and Asio completes the wrong (possibly freed) queue.
// Asio 1.27 fixed it by clearing user_data on every SQE it takes; we apply the same fix here, at the
// only call site, by routing Asio's io_uring_get_sqe through a wrapper. Proven by
// tests/runtime/uring_cancel_stress_test.cpp under ASan.
#include <boost/version.hpp>

#if defined(BOOST_ASIO_HAS_IO_URING) && defined(HMC_ASIO_URING_CANCEL_FIX) && BOOST_VERSION < 108200
#include <liburing.h>

static inline ::io_uring_sqe* hmc_io_uring_get_sqe_cleared(::io_uring* ring) {
  ::io_uring_sqe* sqe = ::io_uring_get_sqe(ring);
  if (sqe != nullptr) ::io_uring_sqe_set_data(sqe, nullptr);
  return sqe;
}
#define io_uring_get_sqe hmc_io_uring_get_sqe_cleared
#define HMC_ASIO_URING_CANCEL_FIX_APPLIED 1
#endif

// The reactor's own fd (the io_uring ring, or the epoll set) is private to Asio; a caller-driven
// EventLoop needs it for its wakeup fd. The reactor is created on the thread that creates an
// io_context's first I/O object, so recording the fd in a thread-local at creation is exact.
static thread_local int hmc_reactor_fd_created = -1;
#if defined(BOOST_ASIO_HAS_IO_URING) && defined(BOOST_ASIO_DISABLE_EPOLL)
#include <liburing.h>

static inline int hmc_io_uring_queue_init_recorded(unsigned entries, ::io_uring* ring, unsigned flags) {
  const int result = ::io_uring_queue_init(entries, ring, flags);
  if (result == 0) hmc_reactor_fd_created = ring->ring_fd;
  return result;
}
#define io_uring_queue_init hmc_io_uring_queue_init_recorded
#else
#include <sys/epoll.h>

static inline int hmc_epoll_create1_recorded(int flags) {
  const int fd = ::epoll_create1(flags);
  hmc_reactor_fd_created = fd;
  return fd;
}
#define epoll_create1 hmc_epoll_create1_recorded
#endif

#include <boost/asio/impl/src.hpp>

namespace hmc::runtime::detail {
// The fd of the reactor created last on this thread, once; -1 when none was.
int take_reactor_fd() noexcept {
  const int fd = hmc_reactor_fd_created;
  hmc_reactor_fd_created = -1;
  return fd;
}

// Lets the runtime report whether this build carries the fix.
bool asio_uring_cancel_fix_applied() noexcept {
#if defined(HMC_ASIO_URING_CANCEL_FIX_APPLIED)
  return true;
#else
  return false;
#endif
}
}  // namespace hmc::runtime::detail
