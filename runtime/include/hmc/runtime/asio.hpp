#pragma once
// The single include point for Boost.Asio in HMC. Every file includes Asio through this header so
// that all translation units agree on the reactor and on separate compilation (see docs/progress.md).

#if !defined(BOOST_ASIO_SEPARATE_COMPILATION)
#error "HMC builds Asio once (BOOST_ASIO_SEPARATE_COMPILATION): link the hmc_asio CMake target"
#endif
#if defined(HMC_ASIO_IO_URING) && !(defined(BOOST_ASIO_HAS_IO_URING) && defined(BOOST_ASIO_DISABLE_EPOLL))
#error "io_uring reactor requested but BOOST_ASIO_HAS_IO_URING/BOOST_ASIO_DISABLE_EPOLL are not both set"
#endif

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/append.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/connect_pair.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/asio/write.hpp>

namespace hmc::runtime {
namespace asio = boost::asio;
using error_code = boost::system::error_code;
}  // namespace hmc::runtime
