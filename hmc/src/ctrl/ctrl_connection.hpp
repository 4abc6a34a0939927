#pragma once
// One control connection (TCP, TLS over TCP, or Unix socket): frames decoded as bytes arrive, an
// ordered write queue, heartbeats and liveness on one timer, reading paused while the peer's inbox
// is over budget. Lives on the loop thread only; keeps itself alive while its read loop runs.
#include <sys/types.h>

#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ctrl/ctrl_frame.hpp"
#include "hmc/ctrl_message.hpp"
#include "hmc/runtime/asio.hpp"
#include "security/no_signal_stream.hpp"

namespace hmc::detail {

namespace asio = runtime::asio;
using runtime::error_code;
using socket_type = asio::generic::stream_protocol::socket;

// Writes pass MSG_NOSIGNAL (a dead peer fails a send instead of raising SIGPIPE); TLS runs on top.
using SocketStream = NoSignalStream<socket_type>;

// Per-connection limits and timers (from CtrlOptions).
struct ConnectionLimits {
  std::uint32_t max_frame_length = 16u << 20;
  std::chrono::milliseconds send_timeout{30000};
  std::chrono::milliseconds heartbeat_interval{1000};
  std::uint32_t heartbeat_misses = 5;
  std::chrono::milliseconds partial_frame_timeout{10000};
};

class CtrlConnection : public std::enable_shared_from_this<CtrlConnection> {
 public:
  using SendDone = asio::any_completion_handler<void(error_code)>;
  using OnMessage = std::function<void(CtrlMessage)>;
  using OnClosed = std::function<void(error_code, const std::string&)>;

  // Starts in handshake mode: frames of at most kMaxHandshakeFrame bytes.
  CtrlConnection(socket_type socket, std::string transport, std::string remote, ConnectionLimits limits);

  // Connects the (not yet connected) socket; ec on failure.
  asio::awaitable<error_code> connect(const socket_type::endpoint_type& ep);

  // TLS over this connection (TCP only), before any frame. ec on failure; asio::ssl errors say why.
  asio::awaitable<error_code> tls_handshake(asio::ssl::context& ctx, asio::ssl::stream_base::handshake_type role);

  // Reads exactly one frame; ec is set on I/O errors, `problem` on malformed input.
  asio::awaitable<Frame> read_frame(error_code& ec, std::string& problem);

  // The heartbeat interval both sides agreed on in the handshake (zero: none); before start().
  void set_heartbeat_interval(std::chrono::milliseconds interval) noexcept { limits_.heartbeat_interval = interval; }

  // Starts the read loop and liveness after the handshake: frames up to max_frame_length, data
  // frames to on_message, the end to on_closed.
  void start(OnMessage on_message, OnClosed on_closed);

  // Queues a whole frame; done(ec) once it is handed to the kernel or the connection failed.
  void send(std::vector<std::byte> frame, SendDone done);

  // Backpressure: stop reading from the socket (the peer's sends stall in TCP), and go on.
  void pause_reading();
  void resume_reading();

  // Shuts the socket down and cancels its operations (the fd closes with this object, once none is
  // in flight); pending and queued sends fail with `reason`. Idempotent.
  void close(error_code reason, const std::string& why);

  bool is_open() const noexcept { return !closed_; }
  bool is_tls() const noexcept { return tls_.has_value(); }
  const std::string& transport() const noexcept { return transport_; }
  const std::string& remote() const noexcept { return remote_; }
  int native_handle() noexcept { return socket().native_handle(); }
  // The uid of a Unix-socket peer (SO_PEERCRED); nullopt for TCP or on error.
  std::optional<uid_t> peer_uid();

 private:
  struct Outgoing {
    std::vector<std::byte> bytes;
    SendDone done;
  };

  socket_type::lowest_layer_type& socket() noexcept { return plain_.lowest_layer(); }
  asio::awaitable<void> read_loop();
  void write_next();
  void write_some();
  void on_written(error_code ec, std::size_t n);
  void watch_send();
  void arm_liveness();
  void on_liveness();

  SocketStream plain_;
  std::optional<asio::ssl::stream<SocketStream&>> tls_;
  std::string transport_;
  std::string remote_;
  ConnectionLimits limits_;
  FrameDecoder decoder_;
  std::vector<std::byte> rbuf_;
  std::size_t rpos_ = 0, rend_ = 0;  // unread bytes of rbuf_
  std::deque<Outgoing> out_;
  std::size_t out_offset_ = 0;  // bytes of out_.front() already written
  bool writing_ = false;
  std::uint64_t writes_done_ = 0;
  std::chrono::steady_clock::time_point write_started_{};
  asio::steady_timer send_watchdog_;
  bool watchdog_armed_ = false;
  std::chrono::steady_clock::time_point last_rx_, last_tx_;
  asio::steady_timer liveness_;
  asio::steady_timer resume_;  // the paused read loop waits on it; cancel() wakes it
  bool paused_ = false;
  bool closed_ = false;
  OnMessage on_message_;
  OnClosed on_closed_;
};

}  // namespace hmc::detail
