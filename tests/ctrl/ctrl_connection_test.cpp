// One control connection over a real socket pair on a real io_uring loop: what its close leaves to
// the sockets that come after it.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <thread>

#include "ctrl/ctrl_connection.hpp"
#include "ctrl/ctrl_frame.hpp"
#include "hmc/runtime/event_loop.hpp"
#include "hmc/status.hpp"

namespace hmc {
namespace {

using namespace std::chrono_literals;
namespace asio = runtime::asio;
using detail::CtrlConnection;
using detail::FrameType;
using detail::socket_type;

struct Pair {
  int mine = -1;  // wrapped in a CtrlConnection
  int peer = -1;  // a plain blocking socket for the test
};

Pair socket_pair() {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  return {fds[0], fds[1]};
}

std::shared_ptr<CtrlConnection> wrap(runtime::EventLoop& loop, int fd) {
  socket_type s(loop.executor());
  runtime::error_code ec;
  s.assign(socket_type::protocol_type(AF_UNIX, 0), fd, ec);
  EXPECT_FALSE(ec) << ec.message();
  return std::make_shared<CtrlConnection>(std::move(s), "uds", "uds", detail::ConnectionLimits{});
}

// What one read_frame brought, once it came back.
struct Read {
  std::optional<FrameType> frame;
  runtime::error_code ec;
  bool done = false;
};

void start_read(runtime::EventLoop& loop, const std::shared_ptr<CtrlConnection>& conn,
                const std::shared_ptr<Read>& out) {
  asio::co_spawn(
      loop.executor(),
      [conn, out]() -> asio::awaitable<void> {
        std::string problem;
        detail::Frame f = co_await conn->read_frame(out->ec, problem);
        if (!out->ec && problem.empty()) out->frame = f.header.type;
        out->done = true;
      },
      asio::detached);
}

// Asio 1.26's io_uring backend frees a closed socket's state while the cancellation of its read
// is still in the ring and hands that state to the next socket it registers; when the cancelled
// read's completion comes, it re-arms that read on the old fd number. The kernel gives the next
// socket that same number, so the stale read would eat the next connection's first frame (a
// Unix-socket upgrade's HELLO taken by the TCP leg closed just before it, the handshake stuck
// until its hello_timeout). A connection closes only its reading and writing; its fd goes when
// nothing of it is in flight.
TEST(CtrlConnection, ClosingWithAReadInFlightLeavesTheNextSocketItsFirstFrame) {
  runtime::EventLoop loop;  // caller-driven: call() runs on this thread with nothing reaped meanwhile
  const Pair a = socket_pair();
  auto first = wrap(loop, a.mine);
  auto first_read = std::make_shared<Read>();
  loop.call([&] { start_read(loop, first, first_read); });
  // The read is submitted by another thread, which then ends: io_uring completes a request through
  // task work on the thread that submitted it, and for one that ended a kernel worker does that a
  // tick later. So the shutdown's wakeup does not complete the read before the cancel is submitted,
  // and it completes with -ECANCELED: as it did in the server, whose napping keeper had submitted it.
  std::thread([&] {
    for (int i = 0; i < 10; ++i) loop.poll();
  }).join();
  ASSERT_FALSE(first_read->done);

  Pair b;
  std::shared_ptr<CtrlConnection> second;
  auto second_read = std::make_shared<Read>();
  loop.call([&] {
    first->close(make_error_code(Status::CLOSED), "test");
    b = socket_pair();
    // The kernel hands out the lowest free number: the closed socket's, when it was really closed.
    if (::fcntl(a.mine, F_GETFD) < 0) {
      ASSERT_EQ(::dup2(b.mine, a.mine), a.mine);
      ::close(b.mine);
      b.mine = a.mine;
    }
    second = wrap(loop, b.mine);
    start_read(loop, second, second_read);
    const auto frame = detail::encode_frame(FrameType::hello, nullptr, 0);
    ASSERT_EQ(::send(b.peer, frame.data(), frame.size(), MSG_NOSIGNAL), static_cast<ssize_t>(frame.size()));
  });
  loop.run_until([&] { return second_read->done; }, runtime::EventLoop::clock::now() + 2s);
  EXPECT_TRUE(second_read->done) << "the second connection never got its frame";
  EXPECT_EQ(second_read->frame, FrameType::hello);
  loop.run_until([&] { return first_read->done; }, runtime::EventLoop::clock::now() + 2s);
  EXPECT_TRUE(first_read->done);
  EXPECT_FALSE(first_read->frame.has_value()) << "the closed connection read the next one's frame";

  second->close(make_error_code(Status::CLOSED), "test");
  loop.run_until([&] { return false; }, runtime::EventLoop::clock::now() + 10ms);
  ::close(a.peer);
  ::close(b.peer);
}

}  // namespace
}  // namespace hmc
