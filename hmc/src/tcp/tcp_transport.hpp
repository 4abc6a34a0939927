#pragma once
// HMC's checked TCP data path, for peers that share no memory with us and have no RDMA path. UCX's
// own tcp transport writes and reads wherever a request says, for anyone who connects; here every
// connection proves the per-peer secret its owner received over the authenticated control channel,
// and the target checks every request against the one region its sender may touch: the session
// buffer. Two connections per peer, one for each side's requests, so a target that stops reading
// requests (its replies are queued) never stops its own replies. Loop thread only.
#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "ctrl/ctrl_socket.hpp"
#include "hmc/conn_buffer.hpp"
#include "hmc/runtime/event_loop.hpp"
#include "security/auth.hpp"
#include "security/handshake_table.hpp"
#include "security/throttled_log.hpp"
#include "transport/op_engine.hpp"
#include "transport/peer_table.hpp"
#include "transport/region_table.hpp"
#include "transport/transport.hpp"

namespace hmc::detail {

struct TcpOptions {
  EngineOptions engine;
  std::size_t max_message = (16u << 20) + 1;  // a larger fast-path message disconnects its sender
  std::chrono::milliseconds handshake_timeout{5000};
  std::size_t max_handshakes = 64;             // unauthenticated connections held at once ...
  std::size_t max_handshakes_per_source = 16;  // ... and from one address; the oldest idle is evicted
  std::size_t max_queued_replies = 4096;       // past this a peer's requests wait (TCP backpressure)
  std::chrono::milliseconds keepalive{0};      // socket keepalive; 0: the kernel's default (off)
};

class TcpTransport final : public Transport, private OpPoster {
 public:
  TcpTransport(runtime::EventLoop& loop, ConnBuffer& buffer, TcpOptions options);
  ~TcpTransport() override;  // aborts every operation and closes every connection
  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;

  // Transport
  void attach() override { poller_ = loop_.attach(*this); }
  std::vector<std::byte> local_info(std::uint32_t to, const LocalAddress& self) override;
  std::string add_peer(std::uint32_t rank, std::span<const std::byte> info) override;
  void set_peer_host(std::uint32_t rank, const std::string& ip) override { host_of_[rank] = ip; }
  void remove_peer(std::uint32_t rank, error_code reason) override;
  const PeerRecord* peer(std::uint32_t rank) const override;
  std::vector<std::uint32_t> ranks() const override;
  std::string carriers(std::uint32_t rank) const override;
  void submit(OpRequest request, Completion done) override { engine_.submit(std::move(request), std::move(done)); }
  std::uint64_t register_region(void* base, std::size_t size, MemoryType type) override;
  void unregister_region(std::uint64_t id) override { regions_.unregister(id); }
  std::size_t region_size(std::uint64_t id) const override;
  std::size_t live_operations() const override { return engine_.live_operations(); }
  void add_stats(SessionStats& out) const override { engine_.add_stats(out); }

  // The data listener's port: 0 before the first local_info, or when the address could not be bound.
  std::uint16_t listen_port() const noexcept { return listen_port_; }
  // Connections refused for a wrong proof, a bad hello or a handshake deadline (tests, logs).
  std::uint64_t refused_connections() const noexcept { return refused_; }

  // runtime::Poller: the sockets complete through the loop's reactor, so progress() only reports
  // that frames moved since the last cycle. That activity makes the adaptive mode spin
  // (running the reactor between cycles) instead of sleeping through the next round trip. The fd
  // is an eventfd nothing signals: every wakeup comes through the reactor.
  bool progress() override;
  runtime::ArmResult try_arm() override { return runtime::ArmResult::armed; }
  int fd() const override { return efd_; }
  bool has_pending() const override { return false; }

 private:
  struct Conn;
  struct Peer {
    PeerRecord record;
    bool added = false;         // add_peer was called (its connections may arrive before)
    bool ready = false;         // on_peer_ready was posted
    std::shared_ptr<Conn> out;  // our requests
    std::shared_ptr<Conn> in;   // the peer's requests, served here
  };

  // OpPoster
  PostResult post_rma(std::uint32_t rank, bool is_put, std::uint64_t region, const Segment& s, PostId token) override;
  PostResult post_flush(std::uint32_t rank, PostId token) override;
  PostResult post_message(std::uint32_t rank, std::span<const std::byte> bytes, PostId token) override;
  PostResult post_notify(std::uint32_t rank, std::span<const std::byte> message, PostId token) override {
    return post_message(rank, message, token);  // one ordered stream: the puts before it are read first
  }
  void kick() override {}

  void open_listener(const std::string& ip);
  runtime::asio::awaitable<void> accept_loop();
  void admit(socket_type s, const std::string& remote);
  runtime::asio::awaitable<void> listener_handshake(std::shared_ptr<Conn> c);
  runtime::asio::awaitable<void> dial(std::shared_ptr<Conn> c, runtime::asio::ip::tcp::endpoint to,
                                      std::array<std::byte, 32> secret);
  runtime::asio::awaitable<void> read_loop(std::shared_ptr<Conn> c);
  runtime::asio::awaitable<bool> serve(std::shared_ptr<Conn> c, std::uint8_t kind, PostId token, std::uint64_t offset,
                                       std::uint64_t length);
  void violation(Conn& c, const std::string& why);
  void connection_failed(const Conn& c, error_code ec);
  void write_now(const std::shared_ptr<Conn>& c);
  Conn* out_conn(std::uint32_t rank) const;
  void enqueue(Conn& c, std::uint8_t kind, PostId token, std::uint64_t offset, std::uint64_t length,
               const std::byte* data, bool report_on_write);
  void attached(std::uint32_t rank, const std::shared_ptr<Conn>& c);
  void set_socket_options(Conn& c) const;
  void maybe_ready(Peer& p);
  void fail_peer(std::uint32_t rank, error_code reason, const std::string& why);
  void close_conn(Conn& c, error_code reason, bool report);
  Mac proof(const std::array<std::byte, 32>& secret, const char* who, std::uint32_t role, std::uint32_t rank,
            const Nonce& listener_nonce, const Nonce& dialer_nonce) const;

  runtime::EventLoop& loop_;
  ConnBuffer& buffer_;
  TcpOptions options_;
  RegionTable regions_;
  OpEngine engine_;
  std::uint32_t self_rank_ = 0;
  std::string listen_ip_;
  std::uint16_t listen_port_ = 0;
  std::optional<runtime::asio::ip::tcp::acceptor> acceptor_;
  HandshakeTable<Conn> handshakes_;
  std::shared_ptr<ThrottledLog> refusals_;
  std::uint64_t refused_ = 0;
  PeerTable<Peer> peers_;
  std::map<std::uint32_t, std::array<std::byte, 32>> secret_for_;  // rank -> the secret we gave it
  std::set<std::uint64_t> device_regions_;                         // registered device memory: refused as a local side
  std::map<std::uint32_t, std::string> host_of_;                   // rank -> where its control connection comes from
  int efd_ = -1;
  std::uint64_t moved_ = 0;           // frames read or written ...
  std::uint64_t moved_reported_ = 0;  // ... and as many as the last progress() reported
  runtime::PollerHandle poller_;
  std::shared_ptr<int> life_ = std::make_shared<int>(0);  // coroutines and posted handlers check it
};

}  // namespace hmc::detail
