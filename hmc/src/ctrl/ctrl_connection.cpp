#include "ctrl/ctrl_connection.hpp"

#include <sys/socket.h>

#include <algorithm>

#include "ctrl/ctrl_handshake.hpp"
#include "hmc/runtime/log.hpp"
#include "hmc/status.hpp"

namespace hmc::detail {

using runtime::log;
using clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kReadChunk = 64u << 10;  // after the handshake; before it, one handshake frame

}  // namespace

CtrlConnection::CtrlConnection(socket_type socket, std::string transport, std::string remote, ConnectionLimits limits)
    : plain_(std::move(socket)),
      transport_(std::move(transport)),
      remote_(std::move(remote)),
      limits_(limits),
      decoder_(kMaxHandshakeFrame),
      rbuf_(kMaxHandshakeFrame),
      send_watchdog_(plain_.get_executor()),
      last_rx_(clock::now()),
      last_tx_(clock::now()),
      liveness_(plain_.get_executor()),
      resume_(plain_.get_executor()) {}

asio::awaitable<error_code> CtrlConnection::connect(const socket_type::endpoint_type& ep) {
  auto self = shared_from_this();
  error_code ec;
  co_await socket().async_connect(ep, asio::redirect_error(asio::use_awaitable, ec));
  co_return ec;
}

asio::awaitable<error_code> CtrlConnection::tls_handshake(asio::ssl::context& ctx,
                                                          asio::ssl::stream_base::handshake_type role) {
  auto self = shared_from_this();
  tls_.emplace(plain_, ctx);
  error_code ec;
  co_await tls_->async_handshake(role, asio::redirect_error(asio::use_awaitable, ec));
  co_return ec;
}

asio::awaitable<Frame> CtrlConnection::read_frame(error_code& ec, std::string& problem) {
  auto self = shared_from_this();
  Frame frame;
  for (;;) {
    while (rpos_ < rend_) {
      bool done = false;
      rpos_ += decoder_.consume(std::span(rbuf_.data() + rpos_, rend_ - rpos_), frame, done, problem);
      if (!problem.empty() || done) co_return frame;
    }
    const auto buf = asio::buffer(rbuf_);
    std::size_t n = 0;
    if (tls_) {  // two statements: GCC 12 mis-compiles co_await on a conditional expression
      n = co_await tls_->async_read_some(buf, asio::redirect_error(asio::use_awaitable, ec));
    } else {
      n = co_await plain_.async_read_some(buf, asio::redirect_error(asio::use_awaitable, ec));
    }
    if (ec) {
      if (decoder_.mid_frame() && (ec == asio::error::eof || ec == asio::ssl::error::stream_truncated))
        problem = "truncated frame: connection closed after " + decoder_.progress();
      co_return frame;
    }
    rpos_ = 0;
    rend_ = n;
    last_rx_ = clock::now();
  }
}

void CtrlConnection::start(OnMessage on_message, OnClosed on_closed) {
  on_message_ = std::move(on_message);
  on_closed_ = std::move(on_closed);
  decoder_.set_max_length(limits_.max_frame_length);
  // Keep the handshake's unread bytes (a peer may send right after its handshake) at the front.
  std::vector<std::byte> bigger(kReadChunk);
  std::copy(rbuf_.begin() + static_cast<std::ptrdiff_t>(rpos_), rbuf_.begin() + static_cast<std::ptrdiff_t>(rend_),
            bigger.begin());
  rend_ -= rpos_;
  rpos_ = 0;
  rbuf_ = std::move(bigger);
  last_rx_ = last_tx_ = clock::now();
  asio::co_spawn(
      plain_.get_executor(), [self = shared_from_this()] { return self->read_loop(); }, asio::detached);
  arm_liveness();
}

asio::awaitable<void> CtrlConnection::read_loop() {
  auto self = shared_from_this();  // the connection lives as long as its read loop
  for (;;) {
    if (paused_) {
      error_code ignored;
      resume_.expires_at(clock::time_point::max());
      co_await resume_.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
      if (closed_) co_return;
      continue;
    }
    error_code ec;
    std::string problem;
    Frame f = co_await read_frame(ec, problem);
    if (closed_) co_return;
    if (!problem.empty()) {
      log().error("ctrl connection {} ({}): {}; closing it", remote_, transport_, problem);
      close(make_error_code(Status::PROTOCOL_ERROR), problem);
      co_return;
    }
    if (ec) {
      const std::string why = ec == asio::error::eof ? "closed by the peer (End of file)" : ec.message();
      log().info("ctrl connection {} ({}) ended: {}", remote_, transport_, why);
      close(make_error_code(Status::PEER_LOST), why);
      co_return;
    }
    const FrameType t = f.header.type;
    if (t == FrameType::heartbeat) continue;  // its bytes already refreshed last_rx_
    if (t == FrameType::tag || t == FrameType::bytes || t == FrameType::transport) {
      if (on_message_) on_message_(CtrlMessage::from_wire(static_cast<CtrlKind>(t), std::move(f.payload)));
      continue;
    }
    const std::string why = "unexpected frame type " + std::to_string(static_cast<int>(t)) + " after the handshake";
    log().error("ctrl connection {} ({}): {}; closing it", remote_, transport_, why);
    close(make_error_code(Status::PROTOCOL_ERROR), why);
    co_return;
  }
}

void CtrlConnection::pause_reading() {
  if (paused_ || closed_) return;
  paused_ = true;
  log().debug("ctrl connection {} ({}): inbox over budget, reading paused", remote_, transport_);
}

void CtrlConnection::resume_reading() {
  if (!paused_) return;
  paused_ = false;
  last_rx_ = clock::now();  // the silence while paused was ours, not the peer's
  resume_.cancel();
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
  write_started_ = clock::now();
  watch_send();
  write_some();
}

void CtrlConnection::write_some() {
  const auto& bytes = out_.front().bytes;
  const auto buf = asio::buffer(bytes.data() + out_offset_, bytes.size() - out_offset_);
  auto done = [self = shared_from_this()](error_code ec, std::size_t n) { self->on_written(ec, n); };
  if (tls_) {
    tls_->async_write_some(buf, std::move(done));
  } else {
    plain_.async_write_some(buf, std::move(done));
  }
}

void CtrlConnection::on_written(error_code ec, std::size_t n) {
  if (!ec && !closed_) {
    last_tx_ = clock::now();
    out_offset_ += n;
    if (out_offset_ < out_.front().bytes.size()) return write_some();
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
  send_watchdog_.expires_after(limits_.send_timeout);
  send_watchdog_.async_wait([self = shared_from_this(), seen](error_code ec) {
    self->watchdog_armed_ = false;
    if (ec || self->closed_ || !self->writing_) return;
    if (self->writes_done_ == seen && clock::now() - self->write_started_ >= self->limits_.send_timeout) {
      log().error("ctrl connection {} ({}): a send made no progress for {} ms; declaring the peer lost", self->remote_,
                  self->transport_, self->limits_.send_timeout.count());
      self->close(make_error_code(Status::PEER_LOST), "send timed out");
      return;
    }
    self->watch_send();
  });
}

// One timer per connection, armed for the earliest of: the next heartbeat to send, the moment the
// peer counts as lost, the partial-frame deadline. An idle connection wakes once per interval.
void CtrlConnection::arm_liveness() {
  const auto interval = limits_.heartbeat_interval;
  auto next = clock::time_point::max();
  if (interval.count() > 0) {
    next = std::min(last_tx_ + interval, last_rx_ + interval * limits_.heartbeat_misses);
  }
  if (limits_.partial_frame_timeout.count() > 0 && decoder_.mid_frame())
    next = std::min(next, last_rx_ + limits_.partial_frame_timeout);
  if (limits_.partial_frame_timeout.count() > 0)
    next = std::min(next, clock::now() + limits_.partial_frame_timeout);  // a frame may start meanwhile
  next = std::max(next, clock::now() + std::chrono::milliseconds(1));
  liveness_.expires_at(next);
  liveness_.async_wait([self = shared_from_this()](error_code ec) {
    if (!ec && !self->closed_) self->on_liveness();
  });
}

void CtrlConnection::on_liveness() {
  const auto now = clock::now();
  const auto interval = limits_.heartbeat_interval;
  if (paused_) last_rx_ = now;  // we are not reading: the peer's silence is not its fault
  if (interval.count() > 0 && now - last_rx_ >= interval * limits_.heartbeat_misses) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_rx_).count();
    const std::string why = "nothing received for " + std::to_string(ms) + " ms (heartbeat " +
                            std::to_string(interval.count()) + " ms x " + std::to_string(limits_.heartbeat_misses) +
                            ")";
    log().warn("ctrl connection {} ({}): {}; declaring the peer lost", remote_, transport_, why);
    close(make_error_code(Status::PEER_LOST), why);
    return;
  }
  if (limits_.partial_frame_timeout.count() > 0 && decoder_.mid_frame() &&
      now - last_rx_ >= limits_.partial_frame_timeout) {
    const std::string why = "partial frame (" + decoder_.progress() + ") idle for " +
                            std::to_string(limits_.partial_frame_timeout.count()) + " ms";
    log().error("ctrl connection {} ({}): {}; closing it", remote_, transport_, why);
    close(make_error_code(Status::PROTOCOL_ERROR), why);
    return;
  }
  if (interval.count() > 0 && now - last_tx_ >= interval) {
    last_tx_ = now;  // also when skipped: a send in progress either moves bytes or cannot be helped
    if (out_.empty()) send(encode_frame(FrameType::heartbeat, nullptr, 0), [](error_code) {});
  }
  arm_liveness();
}

std::optional<uid_t> CtrlConnection::peer_uid() {
  if (transport_ != "uds") return std::nullopt;
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(socket().native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return std::nullopt;
  return cred.uid;
}

void CtrlConnection::close(error_code reason, const std::string& why) {
  if (closed_) return;
  closed_ = true;
  error_code ignored;
  // No TLS close_notify: waiting for the peer's would let a dead peer hold the close; frames are
  // length-prefixed, so a truncation is detected without it.
  socket().shutdown(asio::socket_base::shutdown_both, ignored);
  // Not close(): Asio 1.26's io_uring backend would recycle the socket's state with a cancelled
  // read still in it and re-arm that read on the next socket, which gets this fd number
  // (docs/progress.md, "A closed socket's stale read"). The fd closes with this object, after the
  // last operation's handler (each holds the connection) has run.
  socket().cancel(ignored);
  send_watchdog_.cancel();
  liveness_.cancel();
  resume_.cancel();
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
