#pragma once
// Framed I/O on one TCP socket, in clear or TLS, for the embedded store's client and server (loop
// thread only): whole frames written in order from a bounded queue; frames read with the payload
// grown only as bytes arrive, so a peer announcing a large frame costs nothing until it sends it.
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hmc/runtime/asio.hpp"
#include "security/no_signal_stream.hpp"
#include "store/store_wire.hpp"

namespace hmc::detail {

class StoreStream : public std::enable_shared_from_this<StoreStream> {
 public:
  using tcp = runtime::asio::ip::tcp;

  // Bytes queued by every stream that shares one: a server's bound over all its connections.
  struct QueueBudget {
    std::size_t total = 0;
    std::size_t max = 0;
  };

  // `budget` (may be null) is shared with the other streams it bounds.
  StoreStream(tcp::socket socket, std::size_t max_queued_bytes, std::shared_ptr<QueueBudget> budget = nullptr);
  ~StoreStream();
  StoreStream(const StoreStream&) = delete;
  StoreStream& operator=(const StoreStream&) = delete;

  // TLS over this stream, before any frame: the error of a failed handshake (asio::ssl's say why).
  runtime::asio::awaitable<runtime::error_code> tls_handshake(runtime::asio::ssl::context& ctx,
                                                              runtime::asio::ssl::stream_base::handshake_type role);

  // One frame. The payload must follow its header within `payload_time`. Returns an empty string on
  // success, else why the stream cannot go on (the caller closes it); `closed_cleanly` tells an
  // orderly end of stream before a header from an error.
  runtime::asio::awaitable<std::string> read(std::uint32_t max_length, std::chrono::milliseconds payload_time,
                                             store_wire::Header& header, std::vector<std::byte>& payload,
                                             bool* closed_cleanly = nullptr);

  // Queues a whole frame; false (and the stream is closed) when the peer does not read and more than
  // max_queued_bytes would be waiting, or when frames already wait and the shared budget is spent.
  bool write(std::vector<std::byte> frame);

  // The I/O error that ended the last failed read (a TLS alert is in asio::error::get_ssl_category()).
  runtime::error_code read_error() const { return read_error_; }

  void close();
  bool is_open() const { return socket().is_open(); }
  tcp::socket& socket() { return plain_.next_layer(); }
  const tcp::socket& socket() const { return plain_.next_layer(); }

 private:
  template <class Buffers>
  runtime::asio::awaitable<std::size_t> read_some(const Buffers& b, runtime::error_code& ec);
  void write_next();
  void uncount(std::size_t n);

  NoSignalStream<tcp::socket> plain_;
  std::optional<runtime::asio::ssl::stream<NoSignalStream<tcp::socket>&>> tls_;
  std::deque<std::vector<std::byte>> queue_;
  std::size_t queued_ = 0;
  std::size_t offset_ = 0;  // bytes of queue_.front() already sent
  const std::size_t max_queued_;
  std::shared_ptr<QueueBudget> budget_;
  std::size_t counted_ = 0;  // of queued_, what budget_->total holds for us (none once closed)
  bool writing_ = false;
  runtime::error_code read_error_;
};

}  // namespace hmc::detail
