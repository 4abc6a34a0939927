#pragma once
// Framed I/O on one TCP socket for the embedded store's client and server (loop thread only): whole
// frames written in order from a bounded queue; frames read with the payload grown only as bytes
// arrive, so a peer announcing a large frame costs nothing until it sends it.
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "hmc/runtime/asio.hpp"
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

  // One frame. The payload must follow its header within `payload_time`. Returns an empty string on
  // success, else why the stream cannot go on (the caller closes it); `closed_cleanly` tells an
  // orderly end of stream before a header from an error.
  runtime::asio::awaitable<std::string> read(std::uint32_t max_length, std::chrono::milliseconds payload_time,
                                             store_wire::Header& header, std::vector<std::byte>& payload,
                                             bool* closed_cleanly = nullptr);

  // Queues a whole frame; false (and the stream is closed) when the peer does not read and more than
  // max_queued_bytes would be waiting, or when frames already wait and the shared budget is spent.
  bool write(std::vector<std::byte> frame);

  void close();
  bool is_open() const { return socket_.is_open(); }
  tcp::socket& socket() { return socket_; }

 private:
  void write_next();
  void uncount(std::size_t n);

  tcp::socket socket_;
  std::deque<std::vector<std::byte>> queue_;
  std::size_t queued_ = 0;
  std::size_t offset_ = 0;  // bytes of queue_.front() already sent
  const std::size_t max_queued_;
  std::shared_ptr<QueueBudget> budget_;
  std::size_t counted_ = 0;  // of queued_, what budget_->total holds for us (none once closed)
  bool writing_ = false;
};

}  // namespace hmc::detail
