#include "detail/ctrl_connection.hpp"

#include <sys/socket.h>

#include "hmc/runtime/log.hpp"
#include "hmc/status.hpp"

namespace hmc::detail {

using runtime::log;

CtrlConnection::CtrlConnection(socket_type socket, std::string transport, std::string remote,
                               std::uint32_t max_frame_length, std::chrono::milliseconds send_timeout)
    : socket_(std::move(socket)),
      transport_(std::move(transport)),
      remote_(std::move(remote)),
      max_frame_length_(max_frame_length),
      send_timeout_(send_timeout),
      send_watchdog_(socket_.get_executor()) {}

asio::awaitable<Frame> CtrlConnection::read_frame(error_code& ec, std::string& problem) {
  Frame frame;
  HeaderBytes hb{};
  const std::size_t got = co_await asio::async_read(socket_, asio::buffer(hb), asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    if (ec == asio::error::eof && got != 0)
      problem = "truncated frame: connection closed after " + std::to_string(got) + " of 16 header bytes";
    co_return frame;
  }
  problem = decode_header(hb, max_frame_length_, frame.header);
  if (!problem.empty()) co_return frame;
  frame.payload.resize(frame.header.length);
  if (frame.header.length != 0) {
    const std::size_t n =
        co_await asio::async_read(socket_, asio::buffer(frame.payload), asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::eof)
      problem = "truncated frame: connection closed after " + std::to_string(n) + " of " +
                std::to_string(frame.header.length) + " payload bytes";
  }
  co_return frame;
}

void CtrlConnection::start(OnMessage on_message, OnClosed on_closed) {
  on_message_ = std::move(on_message);
  on_closed_ = std::move(on_closed);
  asio::co_spawn(socket_.get_executor(), [self = shared_from_this()] { return self->read_loop(); }, asio::detached);
}

asio::awaitable<void> CtrlConnection::read_loop() {
  auto self = shared_from_this();  // the connection lives as long as its read loop
  for (;;) {
    error_code ec;
    std::string problem;
    Frame f = co_await read_frame(ec, problem);
    if (!problem.empty()) {
      log().error("ctrl connection {} ({}): {}; closing it", remote_, transport_, problem);
      close(make_error_code(Status::PROTOCOL_ERROR), problem);
      co_return;
    }
    if (ec) {
      if (!closed_) log().info("ctrl connection {} ({}) ended: {}", remote_, transport_, ec.message());
      close(make_error_code(Status::PEER_LOST), ec.message());
      co_return;
    }
    if (f.header.type == FrameType::tag || f.header.type == FrameType::bytes || f.header.type == FrameType::transport) {
      if (on_message_) on_message_(CtrlMessage::from_wire(static_cast<CtrlKind>(f.header.type), std::move(f.payload)));
      continue;
    }
    const std::string why = "unexpected frame type " + std::to_string(static_cast<int>(f.header.type)) +
                            " after the handshake";
    log().error("ctrl connection {} ({}): {}; closing it", remote_, transport_, why);
    close(make_error_code(Status::PROTOCOL_ERROR), why);
    co_return;
  }
}

void CtrlConnection::send(std::vector<std::byte> frame, SendDone done) {
  if (closed_) {
    std::move(done)(make_error_code(Status::PEER_LOST));
    return;
  }
  out_.push_back(Outgoing{std::move(frame), std::move(done)});
  if (!writing_) write_next();
}

void CtrlConnection::write_next() {
  writing_ = true;
  write_started_ = std::chrono::steady_clock::now();
  watch_send();
  const auto& bytes = out_.front().bytes;
  // MSG_NOSIGNAL: a peer that died must fail the send, never raise SIGPIPE (io_uring sends don't add it).
  socket_.async_send(asio::buffer(bytes.data() + out_offset_, bytes.size() - out_offset_), MSG_NOSIGNAL,
                     [self = shared_from_this()](error_code ec, std::size_t n) { self->on_written(ec, n); });
}

void CtrlConnection::on_written(error_code ec, std::size_t n) {
  if (!ec && !closed_) {
    out_offset_ += n;
    if (out_offset_ < out_.front().bytes.size()) {
      socket_.async_send(
          asio::buffer(out_.front().bytes.data() + out_offset_, out_.front().bytes.size() - out_offset_), MSG_NOSIGNAL,
          [self = shared_from_this()](error_code e, std::size_t m) { self->on_written(e, m); });
      return;
    }
    out_offset_ = 0;
    ++writes_done_;
    writing_ = false;  // before the callback: it may close this connection
    Outgoing done = std::move(out_.front());
    out_.pop_front();
    std::move(done.done)(error_code{});
    if (!closed_ && !writing_ && !out_.empty()) write_next();
    return;
  }
  writing_ = false;
  if (closed_) {
    out_.clear();  // close() already failed these sends; the in-flight bytes may go now
    return;
  }
  log().info("ctrl connection {} ({}): send failed: {}", remote_, transport_, ec.message());
  close(make_error_code(Status::PEER_LOST), "send failed: " + ec.message());
}

void CtrlConnection::watch_send() {
  if (watchdog_armed_) return;
  watchdog_armed_ = true;
  const std::uint64_t seen = writes_done_;
  send_watchdog_.expires_after(send_timeout_);
  send_watchdog_.async_wait([self = shared_from_this(), seen](error_code ec) {
    self->watchdog_armed_ = false;
    if (ec || self->closed_ || !self->writing_) return;
    if (self->writes_done_ == seen && std::chrono::steady_clock::now() - self->write_started_ >= self->send_timeout_) {
      log().error("ctrl connection {} ({}): a send made no progress for {} ms; declaring the peer lost",
                  self->remote_, self->transport_, self->send_timeout_.count());
      self->close(make_error_code(Status::PEER_LOST), "send timed out");
      return;
    }
    self->watch_send();
  });
}

void CtrlConnection::close(error_code reason, const std::string& why) {
  if (closed_) return;
  closed_ = true;
  error_code ignored;
  socket_.shutdown(asio::socket_base::shutdown_both, ignored);
  socket_.close(ignored);
  send_watchdog_.cancel();
  // Every queued send fails now; the frame in flight keeps its bytes until on_written releases them.
  for (auto& o : out_) std::move(o.done)(reason);
  if (writing_ && !out_.empty()) {
    out_.erase(out_.begin() + 1, out_.end());
  } else {
    out_.clear();
  }
  if (auto cb = std::move(on_closed_)) cb(reason, why);
}

}  // namespace hmc::detail
