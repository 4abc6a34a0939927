#pragma once
// Control sockets and acceptors created close-on-exec from the first instant (SOCK_CLOEXEC,
// accept4): a child that fork+execs must not keep a port bound or hide a peer's death.
#include <string>

#include "ctrl/ctrl_connection.hpp"

namespace hmc::detail {

// A stream socket for `family` (AF_INET, AF_INET6, AF_UNIX), not connected yet.
socket_type open_stream_socket(const asio::any_io_executor& ex, int family, error_code& ec);

// A listening TCP acceptor on ip:port (0: any free port), SO_REUSEADDR, non-blocking.
void open_tcp_acceptor(asio::ip::tcp::acceptor& acc, const asio::ip::tcp::endpoint& ep, error_code& ec);

// A listening Unix-socket acceptor at `path` (mode 0600), non-blocking.
void open_uds_acceptor(asio::local::stream_protocol::acceptor& acc, const std::string& path, error_code& ec);

// One pending connection from a non-blocking listening fd, close-on-exec; would_block when none.
// `remote` is "ip:port" for TCP, "uds" for a Unix socket.
template <class Acceptor>
socket_type accept_one(Acceptor& acc, std::string& remote, error_code& ec);

}  // namespace hmc::detail
