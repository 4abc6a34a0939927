#include "store/store_stream.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ssl/error.hpp>

namespace hmc::detail {

namespace asio = runtime::asio;
using namespace asio::experimental::awaitable_operators;

StoreStream::StoreStream(tcp::socket socket, std::size_t max_queued_bytes, std::shared_ptr<QueueBudget> budget)
    : plain_(std::move(socket)), max_queued_(max_queued_bytes), budget_(std::move(budget)) {}

StoreStream::~StoreStream() { uncount(counted_); }

void StoreStream::uncount(std::size_t n) {
  n = std::min(n, counted_);
  counted_ -= n;
  if (budget_) budget_->total -= std::min(n, budget_->total);
}

asio::awaitable<runtime::error_code> StoreStream::tls_handshake(asio::ssl::context& ctx,
                                                                asio::ssl::stream_base::handshake_type role) {
  auto self = shared_from_this();
  tls_.emplace(plain_, ctx);
  runtime::error_code ec;
  co_await tls_->async_handshake(role, asio::redirect_error(asio::use_awaitable, ec));
  co_return ec;
}

template <class Buffers>
asio::awaitable<std::size_t> StoreStream::read_some(const Buffers& b, runtime::error_code& ec) {
  std::size_t n = 0;
  if (tls_) {  // two statements: GCC 12 mis-compiles co_await on a conditional expression
    n = co_await tls_->async_read_some(b, asio::redirect_error(asio::use_awaitable, ec));
  } else {
    n = co_await plain_.async_read_some(b, asio::redirect_error(asio::use_awaitable, ec));
  }
  if (ec) read_error_ = ec;
  co_return n;
}

asio::awaitable<std::string> StoreStream::read(std::uint32_t max_length, std::chrono::milliseconds payload_time,
                                               store_wire::Header& header, std::vector<std::byte>& payload,
                                               bool* closed_cleanly) {
  auto self = shared_from_this();
  if (closed_cleanly != nullptr) *closed_cleanly = false;
  std::array<std::byte, store_wire::kHeaderSize> head{};
  runtime::error_code ec;
  std::size_t got = 0;
  while (got < head.size() && !ec) got += co_await read_some(asio::buffer(head.data() + got, head.size() - got), ec);
  if (ec) {
    // A TLS peer that closes its socket without a close_notify ends the stream the same way.
    if (closed_cleanly != nullptr)
      *closed_cleanly = got == 0 && (ec == asio::error::eof || ec == asio::ssl::error::stream_truncated);
    co_return "connection ended: " + ec.message();
  }
  if (auto why = store_wire::decode_header(head, max_length, header); !why.empty()) co_return why;
  payload.clear();
  if (header.length == 0) co_return std::string{};
  // The whole payload within payload_time: a peer dribbling bytes cannot hold the connection.
  auto fill = [&]() -> asio::awaitable<runtime::error_code> {
    runtime::error_code e;
    while (payload.size() < header.length) {
      const std::size_t left = header.length - payload.size();
      const std::size_t want = std::min(left, std::max<std::size_t>(std::size_t{64} << 10, payload.size()));
      const std::size_t old = payload.size();
      payload.resize(old + want);
      const std::size_t n = co_await read_some(asio::buffer(payload.data() + old, want), e);
      payload.resize(old + n);
      if (e) break;
    }
    co_return e;
  };
  asio::steady_timer deadline(socket().get_executor(), payload_time);
  auto r = co_await (fill() || deadline.async_wait(asio::use_awaitable));
  if (r.index() == 1)
    co_return "payload of " + std::to_string(header.length) + " bytes not received within " +
        std::to_string(payload_time.count()) + " ms";
  if (auto e = std::get<0>(r)) co_return "connection ended inside a frame: " + e.message();
  co_return std::string{};
}

bool StoreStream::write(std::vector<std::byte> frame) {
  if (!is_open()) return false;
  const bool over_budget = budget_ && queued_ > 0 && budget_->total + frame.size() > budget_->max;
  if (queued_ + frame.size() > max_queued_ || over_budget) {
    close();
    return false;
  }
  queued_ += frame.size();
  counted_ += frame.size();
  if (budget_) budget_->total += frame.size();
  queue_.push_back(std::move(frame));
  if (!writing_) write_next();
  return true;
}

void StoreStream::write_next() {
  if (queue_.empty() || !is_open()) {
    writing_ = false;
    return;
  }
  writing_ = true;
  const auto& front = queue_.front();
  auto done = [self = shared_from_this()](const runtime::error_code& ec, std::size_t n) {
    if (ec) {
      self->close();
      self->writing_ = false;
      return;
    }
    self->offset_ += n;
    if (self->offset_ == self->queue_.front().size()) {
      self->queued_ -= self->offset_;
      self->uncount(self->offset_);
      self->offset_ = 0;
      self->queue_.pop_front();
    }
    self->write_next();
  };
  const auto rest = asio::buffer(front.data() + offset_, front.size() - offset_);
  if (tls_) tls_->async_write_some(rest, std::move(done));
  else plain_.async_write_some(rest, std::move(done));
}

void StoreStream::close() {
  uncount(counted_);  // what still waits is never sent
  runtime::error_code ignored;
  socket().shutdown(tcp::socket::shutdown_both, ignored);
  socket().close(ignored);
}

}  // namespace hmc::detail
