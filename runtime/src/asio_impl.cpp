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

#include <boost/asio/impl/src.hpp>

namespace hmc::runtime::detail {
// Lets the runtime report whether this build carries the fix.
bool asio_uring_cancel_fix_applied() noexcept {
#if defined(HMC_ASIO_URING_CANCEL_FIX_APPLIED)
  return true;
#else
  return false;
#endif
}
}  // namespace hmc::runtime::detail
