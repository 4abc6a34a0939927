#include "ctrl/ctrl_socket.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace hmc::detail {
namespace {

error_code errno_code() { return error_code(errno, asio::error::get_system_category()); }

int protocol_of(int family) { return family == AF_UNIX ? 0 : IPPROTO_TCP; }

int new_fd(int family, error_code& ec) {
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, protocol_of(family));
  if (fd < 0) ec = errno_code();
  return fd;
}

}  // namespace

socket_type open_stream_socket(const asio::any_io_executor& ex, int family, error_code& ec) {
  socket_type s(ex);
  const int fd = new_fd(family, ec);
  if (fd < 0) return s;
  s.assign(socket_type::protocol_type(family, protocol_of(family)), fd, ec);
  if (ec) ::close(fd);
  return s;
}

void open_tcp_acceptor(asio::ip::tcp::acceptor& acc, const asio::ip::tcp::endpoint& ep, error_code& ec) {
  const int fd = new_fd(ep.protocol().family(), ec);
  if (fd < 0) return;
  acc.assign(ep.protocol(), fd, ec);
  if (ec) {
    ::close(fd);
    return;
  }
  acc.set_option(asio::ip::tcp::acceptor::reuse_address(true), ec);
  if (!ec) acc.bind(ep, ec);
  if (!ec) acc.listen(asio::socket_base::max_listen_connections, ec);
  if (!ec) acc.native_non_blocking(true, ec);
}

void open_uds_acceptor(asio::local::stream_protocol::acceptor& acc, const std::string& path, error_code& ec) {
  const int fd = new_fd(AF_UNIX, ec);
  if (fd < 0) return;
  acc.assign(asio::local::stream_protocol(), fd, ec);
  if (ec) {
    ::close(fd);
    return;
  }
  acc.bind(asio::local::stream_protocol::endpoint(path), ec);
  // The directory is already private; the socket's own mode is a second fence.
  if (!ec && ::chmod(path.c_str(), 0600) != 0) ec = errno_code();
  if (!ec) acc.listen(asio::socket_base::max_listen_connections, ec);
  if (!ec) acc.native_non_blocking(true, ec);
}

template <class Acceptor>
socket_type accept_one(Acceptor& acc, std::string& remote, error_code& ec) {
  socket_type s(acc.get_executor());
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  const int fd = ::accept4(acc.native_handle(), reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    ec = errno == EAGAIN ? make_error_code(asio::error::would_block) : errno_code();
    return s;
  }
  const int family = addr.ss_family == AF_UNIX || len <= sizeof(sa_family_t) ? AF_UNIX : addr.ss_family;
  s.assign(socket_type::protocol_type(family, protocol_of(family)), fd, ec);
  if (ec) {
    ::close(fd);
    return s;
  }
  remote = "uds";
  if (family != AF_UNIX) {
    error_code ignored;
    const asio::ip::tcp::endpoint ep = [&] {
      asio::ip::tcp::endpoint e;
      std::memcpy(e.data(), &addr, std::min<std::size_t>(len, e.capacity()));
      return e;
    }();
    remote = ep.address().to_string() + ":" + std::to_string(ep.port());
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return s;
}

template socket_type accept_one(asio::ip::tcp::acceptor&, std::string&, error_code&);
template socket_type accept_one(asio::local::stream_protocol::acceptor&, std::string&, error_code&);

}  // namespace hmc::detail
