#pragma once
// A stream socket as an Asio stream whose writes pass MSG_NOSIGNAL: io_uring sends do not add it,
// and a dead peer must fail a send, never raise SIGPIPE. TLS runs on top of it.
#include <sys/socket.h>

#include <utility>

namespace hmc::detail {

template <class Socket>
class NoSignalStream {
 public:
  using executor_type = typename Socket::executor_type;
  using lowest_layer_type = typename Socket::lowest_layer_type;

  explicit NoSignalStream(Socket s) : socket_(std::move(s)) {}
  executor_type get_executor() noexcept { return socket_.get_executor(); }
  lowest_layer_type& lowest_layer() noexcept { return socket_.lowest_layer(); }
  const lowest_layer_type& lowest_layer() const noexcept { return socket_.lowest_layer(); }
  Socket& next_layer() noexcept { return socket_; }
  const Socket& next_layer() const noexcept { return socket_; }

  template <class Buffers, class Token>
  auto async_read_some(const Buffers& b, Token&& token) {
    return socket_.async_read_some(b, std::forward<Token>(token));
  }
  template <class Buffers, class Token>
  auto async_write_some(const Buffers& b, Token&& token) {
    return socket_.async_send(b, MSG_NOSIGNAL, std::forward<Token>(token));
  }

 private:
  Socket socket_;
};

}  // namespace hmc::detail
