#pragma once
// One control connection (TCP or Unix socket): framed reads into a callback, an ordered write queue.
// Lives on the loop thread only; keeps itself alive while its read loop runs.
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "detail/ctrl_frame.hpp"
#include "hmc/ctrl_message.hpp"
#include "hmc/runtime/asio.hpp"

namespace hmc::detail {

namespace asio = runtime::asio;
using runtime::error_code;

struct Frame {
  FrameHeader header;
  std::vector<std::byte> payload;
};

class CtrlConnection : public std::enable_shared_from_this<CtrlConnection> {
 public:
  using socket_type = asio::generic::stream_protocol::socket;
  using SendDone = asio::any_completion_handler<void(error_code)>;
  using OnMessage = std::function<void(CtrlMessage)>;
  using OnClosed = std::function<void(error_code, const std::string&)>;

  CtrlConnection(socket_type socket, std::string transport, std::string remote, std::uint32_t max_frame_length,
                 std::chrono::milliseconds send_timeout);

  // Reads exactly one frame; ec is set on I/O errors, `problem` on malformed input.
  asio::awaitable<Frame> read_frame(error_code& ec, std::string& problem);

  // Starts the read loop after the handshake: data frames go to on_message, the end to on_closed.
  void start(OnMessage on_message, OnClosed on_closed);

  // Queues a whole frame; done(ec) once it is handed to the kernel or the connection failed.
  void send(std::vector<std::byte> frame, SendDone done);

  // Closes the socket; pending and queued sends fail with `reason`. Idempotent.
  void close(error_code reason, const std::string& why);

  bool is_open() const noexcept { return !closed_; }
  const std::string& transport() const noexcept { return transport_; }
  const std::string& remote() const noexcept { return remote_; }
  socket_type& socket() noexcept { return socket_; }

 private:
  struct Outgoing {
    std::vector<std::byte> bytes;
    SendDone done;
  };

  asio::awaitable<void> read_loop();
  void write_next();
  void on_written(error_code ec, std::size_t n);
  void watch_send();

  socket_type socket_;
  std::string transport_;
  std::string remote_;
  std::uint32_t max_frame_length_;
  std::chrono::milliseconds send_timeout_;
  std::deque<Outgoing> out_;
  std::size_t out_offset_ = 0;  // bytes of out_.front() already written
  bool writing_ = false;
  std::uint64_t writes_done_ = 0;
  std::chrono::steady_clock::time_point write_started_{};
  asio::steady_timer send_watchdog_;
  bool watchdog_armed_ = false;
  bool closed_ = false;
  OnMessage on_message_;
  OnClosed on_closed_;
};

}  // namespace hmc::detail
