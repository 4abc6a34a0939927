#pragma once
// SessionImpl's members are defined one job per file, as the comments below name them; the
// construction and the control channel in session_impl.cpp.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "hmc/ctrl_channel.hpp"
#include "hmc/memory.hpp"
#include "hmc/runtime/async_ready_set.hpp"
#include "hmc/runtime/log.hpp"
#include "hmc/session.hpp"
#include "staging/staging_transport.hpp"
#include "transport/multi_transport.hpp"
#include "transport/transport.hpp"
#include "ucx/ucx_context.hpp"
#include "verbs/verbs_api.hpp"

namespace hmc {
namespace detail {

using runtime::log;

// Everything a Session owns that lives on the loop thread.
class MetricsEndpoint;

class SessionImpl : public std::enable_shared_from_this<SessionImpl> {
 public:
  SessionImpl(runtime::EventLoop& l, SessionOptions o);
  // Session::stats() on the loop thread.
  SessionStats stats() const;
  void ensure_ctrl(std::uint32_t self_id, const std::string& uds_dir);

  // transport_factory.cpp
  std::shared_ptr<Memory> buffer_memory() const;
  void start_on_loop();
  std::unique_ptr<Transport> make_transport(ConnType type);
  StagingOptions staging_options(ConnType type) const;
  std::shared_ptr<VerbsApi> verbs_api() const;
  void install(std::unique_ptr<MultiTransport> t);
  // Data transports are planes of `transport`, numbered as the control channel's HELLO names them.
  static std::uint8_t plane_of(ConnType type) { return type == ConnType::RDMA ? 1 : 0; }
  static ConnType conn_of(std::uint8_t plane) { return plane == 1 ? ConnType::RDMA : ConnType::UCX; }
  void use_conn(ConnType type);
  std::string admit_plane(std::uint8_t plane);
  Transport& default_plane() const { return *transport->plane(plane_of(conn)); }

  // fast_path.cpp
  // The control fast path. After its endpoint is up, a sender sends SWITCH on the socket and every
  // later control message as a UCX active message; the receiver holds active messages that overtake
  // the SWITCH until it reads it, so the order the sender chose is the order ctrl_recv sees.
  static constexpr std::array<std::byte, 4> kSwitch{std::byte{'H'}, std::byte{'M'}, std::byte{'C'}, std::byte{'S'}};
  void fast_message(std::uint32_t rank, std::span<const std::byte> bytes);
  void fast_switch(std::uint32_t rank);
  std::vector<CtrlMessage> take_early(std::uint32_t rank);
  void outran(std::uint32_t rank);

  // peer_book.cpp
  // A caller waiting for a peer at an address to connect (a server naming a client by its ip).
  using AddressHandler = runtime::asio::any_completion_handler<void(std::exception_ptr, std::uint32_t)>;
  struct AddressWaiter {
    std::string ip;
    std::optional<std::uint16_t> port;
    AddressHandler handler;
    std::unique_ptr<runtime::asio::steady_timer> timer;
  };

  // A peer whose control connection came up and then went: how, and the names it had, so that
  // later operations and lookups say PeerLostError with the reason instead of "not connected".
  // The newest kMaxLost only: a server whose clients come and go must not grow it forever.
  struct Loss {
    std::string how;
    std::string ip, dialed;  // advertised and dialled addresses
    std::uint16_t data_port = 0;
    std::uint64_t seq = 0;  // which entry of lost_order is this one's
  };
  static constexpr std::size_t kMaxLost = 1024;

  bool route(std::uint32_t rank);
  void peer_up(std::uint32_t rank);
  void peer_info(std::uint32_t rank, const CtrlMessage& m);
  void peer_ready(std::uint32_t rank);
  void peer_down(std::uint32_t rank, const std::string& how);
  void connected(std::uint32_t rank, const std::string& ip, std::optional<std::uint16_t> port);
  std::vector<std::uint32_t> ranks_named(const std::string& ip, std::optional<std::uint16_t> port) const;
  std::exception_ptr resolve(const std::string& ip, std::optional<std::uint16_t> port, std::uint32_t& rank) const;
  void wait_address(const std::string& ip, std::optional<std::uint16_t> port, std::chrono::milliseconds timeout,
                    AddressHandler h);
  void wake_address_waiters();
  void finish_waiter(std::uint64_t id, std::exception_ptr e, std::uint32_t rank);
  void note_loss(std::uint32_t rank, const std::string& how);
  static std::string lost_text(std::uint32_t rank, const Loss& l);

  // argument_checks.cpp
  std::exception_ptr validate(bool is_put, std::uint32_t rank, std::uint64_t region, std::span<const Segment> segs,
                              std::size_t chunk, std::size_t window, bool pipeline) const;

  // goodbye.cpp
  void start_close(Session::handler h);
  void stop_admitting();
  void maybe_finish_close();
  void close_on_loop();
  void flush_then(std::uint32_t rank, std::function<void()> then);
  void send_bye(std::uint32_t rank, std::function<void()> sent);
  void bye(std::uint32_t rank, std::uint64_t fast_messages);
  void after_goodbyes(std::uint32_t rank);
  void depart_when_ready(std::uint32_t rank);
  void depart(std::uint32_t rank);

  runtime::EventLoop& loop;
  SessionOptions opts;
  std::shared_ptr<UcxContext> ucx_context;
  std::unique_ptr<ConnBuffer> buffer;
  std::unique_ptr<CtrlChannel> ctrl;
  std::unique_ptr<MultiTransport> transport;
  ConnType conn = ConnType::UCX;                // the default transport (Session::conn_type)
  runtime::AsyncReadySet<std::uint32_t> ready;  // ranks with a usable data connection
  // The transport of each peer from its control connection's start to its loss, readable from any
  // thread (Session::check_conn); rdma_peers counts those not on UCX, so that UCX-only sessions
  // never take the lock.
  mutable std::mutex peer_conns_mutex;
  std::map<std::uint32_t, ConnType> peer_conns;
  std::atomic<std::size_t> rdma_peers{0};
  void set_peer_conn(std::uint32_t rank, std::optional<ConnType> type);
  std::optional<ConnType> peer_conn(std::uint32_t rank) const;
  std::map<std::uint32_t, std::string> dialed;             // rank -> the ip connect() reached it at
  std::map<std::uint64_t, AddressWaiter> address_waiters;  // one per blocked caller: bounded by callers
  std::uint64_t next_waiter = 0;
  std::set<std::uint32_t> fast_send, fast_recv;  // ranks whose control messages use the fast path
  struct Early {
    std::vector<CtrlMessage> messages;
    std::size_t bytes = 0;
  };
  std::map<std::uint32_t, Early> fast_early;      // fast-path messages that overtook the SWITCH
  std::size_t early_bytes = 0;                    // over every peer's Early
  static constexpr std::size_t kMaxEarly = 4096;  // a sender cannot make us hold more
  std::map<std::uint32_t, Loss> linked;           // ranks whose control connection is up, with their names once ready
  std::map<std::uint32_t, Loss> lost;
  std::deque<std::pair<std::uint32_t, std::uint64_t>> lost_order;  // (rank, seq), oldest first
  std::uint64_t loss_seq = 0;
  std::shared_ptr<MetricsEndpoint> metrics;  // the endpoint serving stats(), when one is asked for
  std::uint64_t metrics_id = 0;
  std::string advertised_ip;
  std::string bind_ip;                       // where init_server bound the control listener; empty for a client
  std::array<std::uint16_t, 2> data_port{};  // by plane: how clients of each transport name this session
  std::uint16_t ctrl_port = 0;
  bool closed = false;

  // The goodbye (start_close): BYE, then the number of fast-path messages sent on this connection.
  static constexpr std::array<std::byte, 4> kBye{std::byte{'H'}, std::byte{'M'}, std::byte{'C'}, std::byte{'B'}};
  static constexpr std::chrono::milliseconds kGoodbyeBudget{2000};  // a silent peer delays a close by this much
  struct Departure {
    std::uint64_t expected = 0;  // fast-path messages its BYE announced
    bool flushed = false;        // ours to it are complete at it
    std::unique_ptr<runtime::asio::steady_timer> timer;
  };
  std::map<std::uint32_t, std::uint64_t> fast_sent, fast_received;  // per connection
  std::set<std::uint32_t> bye_seen;                                 // one BYE per connection counts
  std::map<std::uint32_t, Departure> departing;                     // peers closing while we stay
  bool closing = false, close_done = false;
  std::set<std::uint32_t> goodbye_waiting;  // peers whose BYE our close waits for
  std::size_t goodbye_unsent = 0;           // our BYEs not yet written
  std::set<std::uint32_t> bye_sent;         // peers our close's BYE was written to
  std::unique_ptr<runtime::asio::steady_timer> goodbye_timer;
  std::vector<Session::handler> close_waiters;
};

}  // namespace detail
}  // namespace hmc
