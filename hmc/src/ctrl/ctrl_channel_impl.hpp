#pragma once
// CtrlChannelImpl's members are defined one job per file, as the comments below name them; its
// construction, peers and closing in ctrl_channel_impl.cpp.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ctrl/ctrl_connection.hpp"
#include "ctrl/ctrl_handshake.hpp"
#include "ctrl/handshake_deadline.hpp"
#include "ctrl/notify_waits.hpp"
#include "hmc/ctrl_channel.hpp"
#include "hmc/runtime/async_queue.hpp"
#include "hmc/runtime/async_ready_set.hpp"
#include "hmc/runtime/deadline.hpp"
#include "hmc/runtime/log.hpp"
#include "security/auth.hpp"
#include "security/handshake_table.hpp"
#include "security/throttled_log.hpp"
#include "security/tls_context.hpp"

namespace hmc {
namespace detail {

using runtime::log;
using tcp = asio::ip::tcp;
using uds = asio::local::stream_protocol;
using clock = std::chrono::steady_clock;

// inbox.cpp
std::size_t inbox_cost(const CtrlMessage& m);

// ctrl_channel_impl.cpp
std::string ms(std::chrono::milliseconds d);

// Where a user fixes a mismatch, named in the side's own error so that it need not read the peer's log.
constexpr const char* kTlsHint =
    "check tls_cert, tls_key, tls_ca / HMC_TLS_CERT, HMC_TLS_KEY, HMC_TLS_CA on both sides";

// A TLS handshake that met plain text (an HMC frame) instead of a TLS record: the peer has TLS off.
bool peer_spoke_plain_text(const error_code& ec);

class CtrlChannelImpl : public std::enable_shared_from_this<CtrlChannelImpl> {
 public:
  CtrlChannelImpl(runtime::EventLoop& l, std::uint32_t rank, CtrlOptions o);

  struct Peer {
    Peer(runtime::loop_executor e, std::shared_ptr<std::size_t> total)
        : inbox(e), notify_waits(e), inbox_total(std::move(total)) {}
    Peer(const Peer&) = delete;
    Peer& operator=(const Peer&) = delete;
    // Whatever it still holds leaves the total with it, however the peer goes.
    ~Peer() { *inbox_total -= std::min(*inbox_total, inbox_bytes); }
    std::shared_ptr<CtrlConnection> conn;  // null before the rank first connected and after it is lost
    runtime::AsyncQueue<CtrlMessage> inbox;
    NotifyWaits notify_waits;                  // wait_notify: tags it asks for skip the inbox
    std::shared_ptr<std::size_t> inbox_total;  // the channel's sum of inbox_bytes, for total_inbox_budget
    std::size_t inbox_bytes = 0;               // what inbox holds (or hands to a waiter), for inbox_budget
    bool ever_connected = false;               // false: a placeholder made by a receive that waits for the rank
    std::string lost_why;                      // how the last connection ended
    std::uint8_t plane = 0;                    // the data transport its connection is for
  };

  // A TCP leg that was offered the Unix socket: it holds its rank until the client moves or stays.
  struct Pending {
    std::shared_ptr<CtrlConnection> conn;
    Nonce ticket;
    std::uint8_t plane = 0;
  };

  struct ConnectResult {
    error_code ec;
    std::string why;
    std::shared_ptr<CtrlConnection> conn;
    std::uint32_t server_rank = 0;
    std::uint32_t my_rank = 0;
    bool busy = false;     // the server refused for load (REJECT busy): worth asking again
    bool refused = false;  // every try was refused until the deadline: nothing listens there
  };

  // The result of a client handshake on one connection.
  struct ClientResult {
    error_code ec;
    std::string why;
    WelcomeMsg welcome;
    bool busy = false;
  };

  // Completes an HMC operation: the error code becomes the typed exception here, nowhere else.
  template <class Sig, class... Args>
  void complete(asio::any_completion_handler<Sig> h, error_code ec, const std::string& context, Args&&... args) {
    runtime::complete_later(ex, std::move(h), ec ? make_error(ec, context) : nullptr, std::forward<Args>(args)...);
  }

  // ctrl_channel_impl.cpp
  ConnectionLimits limits() const;
  bool alive(std::uint32_t rank) const;
  void add_peer(std::uint32_t rank, const std::shared_ptr<CtrlConnection>& conn, std::uint8_t plane);
  void forget_old_losses(std::uint32_t just_lost);
  static std::string transport_name(const CtrlConnection& c);
  std::uint32_t own_heartbeat_ms() const;
  void close_all();

  // rank_allocator.cpp
  bool rank_in_use(std::uint32_t rank) const;
  std::uint32_t assign_rank();

  // inbox.cpp
  void push_message(const std::shared_ptr<Peer>& p, CtrlMessage m);
  bool holds_more_than(const Peer& p, std::size_t fraction) const;
  void drained(Peer& p, std::size_t cost);
  std::shared_ptr<Peer> new_peer();

  // ctrl_server.cpp
  template <class Acceptor>
  asio::awaitable<void> accept_loop(Acceptor& acceptor, std::string transport);
  std::size_t connection_count() const;
  void note_refusal(const std::string& why);
  void admit(socket_type s, const std::string& transport, const std::string& remote);
  void evict(const std::shared_ptr<CtrlConnection>& victim, const std::string& why);
  void refuse(const std::shared_ptr<CtrlConnection>& conn, RejectCode code, const std::string& why);
  asio::awaitable<void> server_handshake(std::shared_ptr<CtrlConnection> conn);
  void accept_upgrade(const std::shared_ptr<CtrlConnection>& conn, const ServerHandshake& hs);
  void stop_listening();

  // ctrl_client.cpp
  // Every connection an attempt opened, so that the deadline can close them whatever they wait on.
  struct Attempt {
    Attempt(const runtime::loop_executor& e, std::chrono::milliseconds t)
        : deadline(e, runtime::deadline_after(t)), timeout(t) {}
    HandshakeDeadline deadline;
    std::chrono::milliseconds timeout;  // what `deadline` is after the start, for messages
    std::uint8_t plane = 0;             // the data transport the HELLOs name
    std::shared_ptr<CtrlConnection> track(std::shared_ptr<CtrlConnection> c) {
      deadline.watch(c);
      conns.push_back(c);
      return c;
    }
    std::vector<std::shared_ptr<CtrlConnection>> conns;
  };

  asio::awaitable<ClientResult> client_handshake(std::shared_ptr<CtrlConnection> conn, HelloMsg hello);
  std::string auth_failure(const ClientHandshake& hs) const;
  asio::awaitable<ConnectResult> dial(std::string host, std::uint16_t port, Attempt& attempt);
  asio::awaitable<std::shared_ptr<CtrlConnection>> upgrade(const WelcomeMsg& w, Attempt& attempt, std::string& why_not);
  asio::awaitable<void> connect(std::string host, std::uint16_t port, std::chrono::milliseconds timeout,
                                std::uint8_t plane, CtrlChannel::connect_handler h);

  runtime::EventLoop& loop;
  runtime::loop_executor ex;
  CtrlHandlers handlers;
  std::atomic<std::uint32_t> self_rank;  // read from any thread by rank()
  const CtrlOptions opts;
  AuthKey key;
  std::string key_origin;  // where `key` came from, for a client's "different keys" error
  std::unique_ptr<asio::ssl::context> tls;
  std::shared_ptr<std::size_t> inbox_total = std::make_shared<std::size_t>(0);
  std::map<std::uint32_t, std::shared_ptr<Peer>> peers;
  runtime::AsyncReadySet<std::uint32_t> connected;  // ranks with a live connection, for async_wait_peer
  HandshakeTable<CtrlConnection> handshaking{opts.max_handshakes, opts.max_handshakes_per_source};
  std::shared_ptr<ThrottledLog> handshake_log = std::make_shared<ThrottledLog>(ex, "ctrl");
  std::map<std::uint32_t, Pending> reserved;
  std::deque<std::uint32_t> losses;  // ranks in the order they were lost, for forget_old_losses
  std::uint32_t next_assign = 1;
  std::optional<tcp::acceptor> tcp_acceptor;
  std::optional<uds::acceptor> uds_acceptor;
  std::string uds_path;
  bool listening = false;
  bool closed = false;
  std::size_t refused = 0;
  clock::time_point last_refusal_log{};
  CtrlStats counters;  // CtrlChannel::stats()
};

}  // namespace detail
}  // namespace hmc
