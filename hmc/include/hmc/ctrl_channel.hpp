#pragma once
// The control channel: rank-addressed, ordered, framed messages over TCP (optionally TLS) or Unix
// sockets, on the event loop. Peers prove they hold the shared key before anything else is
// exchanged (docs/security.md). Every operation is an Asio async operation (awaitable,
// future, callback) whose error is a typed hmc::Error inside the std::exception_ptr; all members
// are safe from any thread.
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hmc/ctrl_message.hpp"
#include "hmc/ctrl_options.hpp"
#include "hmc/runtime/async_op.hpp"
#include "hmc/runtime/event_loop.hpp"
#include "hmc/session_stats.hpp"

namespace hmc {

namespace detail {
class CtrlChannelImpl;
}

// Callbacks for the layer above (the Session), run on the loop thread.
struct CtrlHandlers {
  std::function<void(std::uint32_t rank, bool up)> on_peer;           // connected / lost
  std::function<void(std::uint32_t rank, CtrlMessage)> on_transport;  // CtrlKind::transport messages
  // A client's HELLO names data transport `plane` (1-15; 0, the server's default, is always served):
  // empty to accept it, else why not, which the client's connect raises as UnsupportedError.
  std::function<std::string(std::uint8_t plane)> admit_plane;
};

class CtrlChannel {
 public:
  using asio_handler = runtime::asio::any_completion_handler<void(std::exception_ptr)>;
  using connect_handler = runtime::asio::any_completion_handler<void(std::exception_ptr, std::uint32_t)>;
  using recv_handler = runtime::asio::any_completion_handler<void(std::exception_ptr, CtrlMessage)>;

  // A channel whose rank the first server it connects to assigns (1, 2, ... in connection order).
  static constexpr std::uint32_t any_rank = 0xFFFFFFFFu;

  // Resolves the shared key (CtrlOptions::auth_key, HMC_AUTH_KEY, the key file) and loads the TLS
  // files; InvalidConfigError when either cannot be had.
  CtrlChannel(runtime::EventLoop& loop, std::uint32_t self_rank, CtrlOptions options = CtrlOptions::from_env());
  ~CtrlChannel();  // close()
  CtrlChannel(const CtrlChannel&) = delete;
  CtrlChannel& operator=(const CtrlChannel&) = delete;

  // This channel's rank; any_rank until a server assigned one.
  std::uint32_t rank() const noexcept;

  // Installs the handlers; call before listen() and async_connect().
  void set_handlers(CtrlHandlers handlers);

  // Accepts peers on bind_ip:port (0 picks a free port) and, unless the transport is tcp, on a Unix
  // socket in a private directory that authenticated same-host clients learn from the handshake.
  // Returns the bound TCP port. InvalidConfigError when the address cannot be bound.
  std::uint16_t listen(const std::string& bind_ip, std::uint16_t port);
  std::string uds_path() const;  // empty when there is no Unix-socket listener
  // Stops accepting (TCP and Unix socket); connected peers keep working both ways. Idempotent.
  void stop_listening();

  // Connects to a peer's listener and authenticates both ways (a same-host peer then moves to the
  // Unix socket the server names); completes with the peer's rank. AuthenticationError when either
  // side's proof (or TLS certificate) fails, TimeoutError after `timeout`.
  // `plane` names the data transport this connection is for (0: the server's default); the server
  // learns it in the authenticated HELLO (plane_of) and may refuse it (CtrlHandlers::admit_plane).
  template <class Token>
  auto async_connect(std::string host, std::uint16_t port, std::chrono::milliseconds timeout, std::uint8_t plane,
                     Token&& token) {
    return runtime::async_on_loop<void(std::exception_ptr, std::uint32_t)>(
        executor(), std::forward<Token>(token),
        [impl = impl_, host = std::move(host), port, timeout, plane](connect_handler h) mutable {
          start_connect(impl, std::move(host), port, timeout, plane, std::move(h));
        });
  }
  template <class Token>
  auto async_connect(std::string host, std::uint16_t port, std::chrono::milliseconds timeout, Token&& token) {
    return async_connect(std::move(host), port, timeout, 0, std::forward<Token>(token));
  }

  // Completes once `rank` is connected (at once if it already is).
  template <class Token>
  auto async_wait_peer(std::uint32_t rank, std::chrono::milliseconds timeout, Token&& token) {
    return runtime::async_on_loop<void(std::exception_ptr)>(
        executor(), std::forward<Token>(token),
        [impl = impl_, rank, timeout](asio_handler h) mutable { start_wait_peer(impl, rank, timeout, std::move(h)); });
  }

  // Queues one message to `rank`; completes when the whole frame is handed to the kernel. Messages
  // to one peer keep the order in which they reached the loop; frames never interleave.
  template <class Token>
  auto async_send(std::uint32_t rank, CtrlMessage message, Token&& token) {
    return runtime::async_on_loop<void(std::exception_ptr)>(
        executor(), std::forward<Token>(token), [impl = impl_, rank, m = std::move(message)](asio_handler h) mutable {
          start_send(impl, rank, std::move(m), std::move(h));
        });
  }

  // The next message from `rank`, in order; a rank that has not connected yet is waited for. Messages
  // already received are delivered even after the peer is gone; then PeerLostError. TimeoutError
  // after `timeout` (the message stays queued).
  template <class Token>
  auto async_recv(std::uint32_t rank, std::chrono::milliseconds timeout, Token&& token) {
    return runtime::async_on_loop<void(std::exception_ptr, CtrlMessage)>(
        executor(), std::forward<Token>(token),
        [impl = impl_, rank, timeout](recv_handler h) mutable { start_recv(impl, rank, timeout, std::move(h)); });
  }

  // Completes once `count` tags equal to `tag` arrived from `rank`, taking them out of the inbox's
  // order (ctrl_recv never sees them); tags already received count. The oldest wait for a tag is
  // served first. TimeoutError after `timeout` (the tags it counted go to the next wait for that
  // tag), PeerLostError once the peer is gone and not enough arrived, InvalidArgumentError for a
  // count of 0 or more than NotifyWaits::kMaxWaits pending waits on one peer.
  template <class Token>
  auto async_wait_tag(std::uint32_t rank, std::uint64_t tag, std::uint64_t count, std::chrono::milliseconds timeout,
                      Token&& token) {
    return runtime::async_on_loop<void(std::exception_ptr)>(
        executor(), std::forward<Token>(token), [impl = impl_, rank, tag, count, timeout](asio_handler h) mutable {
          start_wait_tag(impl, rank, tag, count, timeout, std::move(h));
        });
  }

  // Hands a message that arrived by another path (the Session's UCX fast path) to rank's inbox,
  // behind everything already received from it. Dropped when rank is not connected. That path
  // cannot be paused: false when the inbox already holds twice its budget (or all inboxes twice
  // theirs), and the message is dropped; the caller then disconnects the sender.
  bool deliver(std::uint32_t rank, CtrlMessage message);

  // Ranks with a live connection.
  std::vector<std::uint32_t> peers() const;
  // How the connection to `rank` ended (e.g. a heartbeat timeout); empty while it is up, or for a
  // rank never connected or lost long ago.
  std::string lost_reason(std::uint32_t rank) const;
  // "tcp", "tls" or "uds" for a connected peer; NotConnectedError otherwise.
  std::string transport_of(std::uint32_t rank) const;
  // The IP address a connected peer's TCP (or TLS) connection comes from; empty for a Unix socket
  // or a rank not connected.
  std::string remote_host(std::uint32_t rank) const;
  // The data transport a connected peer's connection is for (async_connect's plane); 0 for a rank
  // not connected.
  std::uint8_t plane_of(std::uint32_t rank) const;

  // Messages over the channel's sockets and the handshakes it refused, since it was made.
  CtrlStats stats() const;

  // Closes the connection to one peer; its pending and later receives fail with PeerLostError.
  void disconnect(std::uint32_t rank);
  // Stops listening and closes every connection. Idempotent.
  void close();

 private:
  runtime::loop_executor executor() const noexcept;

  static void start_connect(const std::shared_ptr<detail::CtrlChannelImpl>& impl, std::string host, std::uint16_t port,
                            std::chrono::milliseconds timeout, std::uint8_t plane, connect_handler h);
  static void start_wait_peer(const std::shared_ptr<detail::CtrlChannelImpl>& impl, std::uint32_t rank,
                              std::chrono::milliseconds timeout, asio_handler h);
  static void start_send(const std::shared_ptr<detail::CtrlChannelImpl>& impl, std::uint32_t rank, CtrlMessage m,
                         asio_handler h);
  static void start_recv(const std::shared_ptr<detail::CtrlChannelImpl>& impl, std::uint32_t rank,
                         std::chrono::milliseconds timeout, recv_handler h);
  static void start_wait_tag(const std::shared_ptr<detail::CtrlChannelImpl>& impl, std::uint32_t rank,
                             std::uint64_t tag, std::uint64_t count, std::chrono::milliseconds timeout, asio_handler h);

  runtime::EventLoop& loop_;
  std::shared_ptr<detail::CtrlChannelImpl> impl_;
};

}  // namespace hmc
