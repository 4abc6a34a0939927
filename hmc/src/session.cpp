#include "hmc/session.hpp"

#include <algorithm>
#include <cstdlib>
#include <array>
#include <deque>
#include <map>
#include <set>
#include <optional>

#include "hmc/ctrl_channel.hpp"
#include "hmc/error.hpp"
#include "hmc/memory.hpp"
#include "hmc/runtime/async_ready_set.hpp"
#include "hmc/runtime/deadline.hpp"
#include "hmc/runtime/log.hpp"
#include "wire/byte_order.hpp"
#include "transport/fast_message.hpp"
#include "staging/device_copier.hpp"
#include "staging/staging_transport.hpp"
#include "tcp/tcp_transport.hpp"
#include "transport/routed_transport.hpp"
#include "transport/transport.hpp"
#include "ucx/ucx_host_memory.hpp"
#include "ucx/ucx_transport.hpp"
#include "verbs/emulated_verbs.hpp"
#include "verbs/verbs_transport.hpp"

namespace hmc {
namespace detail {

using runtime::log;

// Everything a Session owns that lives on the loop thread.
class SessionImpl : public std::enable_shared_from_this<SessionImpl> {
 public:
  SessionImpl(runtime::EventLoop& l, SessionOptions o)
      : loop(l),
        opts(std::move(o)),
        ucx_context(UcxContext::create({opts.ucx_tls, opts.ucx_net_devices, opts.ucx_keepalive})),
        buffer(std::make_unique<ConnBuffer>(buffer_memory(), opts.buffer_size)),
        ready(l.executor()) {}

  // Host buffers come from UCX (shared memory same-host peers map); device buffers from their backend.
  std::shared_ptr<Memory> buffer_memory() const {
    if (opts.mem_type == MemoryType::CPU || opts.mem_type == MemoryType::DEFAULT)
      return std::make_shared<UcxHostMemory>(ucx_context, opts.device_id);
    return device_memory(opts.mem_type, opts.device_id);
  }

  // The only place that knows which transport carries the data; everything else uses Transport.
  void start_on_loop() { install(make_transport(opts.conn_type), opts.conn_type); }

  std::unique_ptr<Transport> make_transport(ConnType type) {
    const EngineOptions engine{opts.timeout, opts.max_inflight};
    const std::size_t max_message = std::size_t{opts.ctrl.max_frame_length} + 1;  // the kind byte
    if (type == ConnType::RDMA) {
      VerbsOptions vo;
      vo.engine = engine;
      vo.max_message = max_message;
      vo.device = opts.rdma_device;
      vo.port = opts.rdma_device_port;
      vo.gid_index = opts.rdma_gid_index;
      vo.num_chs = opts.num_chs;
      return std::make_unique<StagingTransport>(loop, *buffer, staging_options(type), [&](ConnBuffer& exposed) {
        return std::make_unique<VerbsTransport>(loop, verbs_api(), exposed, vo);
      });
    }
    UcxOptions uo;
    uo.engine = engine;
    uo.max_message = max_message;
    TcpOptions to;
    to.engine = engine;
    to.max_message = max_message;
    to.keepalive = opts.ucx_keepalive;
    // Device memory UCX cannot move is staged through host memory (docs/gpu-staging.md).
    return std::make_unique<StagingTransport>(loop, *buffer, staging_options(type), [&](ConnBuffer& exposed) {
      return std::make_unique<RoutedTransport>(std::make_unique<UcxTransport>(loop, ucx_context, exposed, uo),
                                               std::make_unique<TcpTransport>(loop, exposed, to), opts.shared_memory);
    });
  }

  // Verbs moves host memory only (no GPUDirect yet): device memory is staged over it too.
  StagingOptions staging_options(ConnType type) const {
    std::vector<MemoryType> native = type == ConnType::RDMA ? std::vector<MemoryType>{MemoryType::CPU}
                                                            : ucx_context->memory_types();
    return StagingOptions{opts.staging_bytes, opts.staging_chunk, opts.timeout, std::move(native)};
  }

  // rdma-core, unless the tests asked for the emulated fabric explicitly.
  std::shared_ptr<VerbsApi> verbs_api() const {
    const char* env = std::getenv("HMC_VERBS_EMULATION");
    if (opts.verbs_emulation || (env != nullptr && std::string(env) == "1")) {
      log().warn("RDMA over the in-process EMULATED fabric (verbs_emulation / HMC_VERBS_EMULATION=1): "
                 "for tests only, nothing leaves this process");
      return EmulatedFabric::shared();
    }
    return make_ibverbs_api();
  }

  void install(std::unique_ptr<Transport> t, ConnType type) {
    transport = std::move(t);
    conn = type;
    transport->on_peer_failed = [weak = weak_from_this()](std::uint32_t rank, error_code ec) {
      if (auto self = weak.lock())
        self->peer_down(rank, status_of(ec) == Status::PROTOCOL_ERROR
                                  ? "it broke the data-plane protocol and was disconnected (see the log)"
                                  : "its data connection failed (the log has the transport's reason)");
    };
    transport->on_peer_ready = [weak = weak_from_this()](std::uint32_t rank) {
      if (auto self = weak.lock()) self->peer_ready(rank);
    };
    transport->on_message = [weak = weak_from_this()](std::uint32_t rank, std::span<const std::byte> bytes) {
      if (auto self = weak.lock()) self->fast_message(rank, bytes);
    };
    transport->attach();
  }

  // ConnType::RDMA from connect/init_server: the session's transport becomes verbs while it has no
  // control channel (so no peer) yet; ConnType::UCX means "the session's transport".
  void use_conn(ConnType type, const std::string& what) {
    if (type == conn || type == ConnType::UCX) return;
    if (ctrl)
      throw InvalidArgumentError(what + ": ConnType::RDMA on a session that already carries its data over UCX; "
                                        "create a session with conn_type RDMA (one transport per session)");
    install(make_transport(type), type);  // the new one is built first: a failure leaves UCX in place
  }

  // The control channel exists once this session knows its own rank (init_server or connect).
  void ensure_ctrl(std::uint32_t self_id, const std::string& uds_dir) {
    if (ctrl) {
      if (self_id != CtrlChannel::any_rank && ctrl->rank() != self_id)
        throw InvalidArgumentError("self_id " + std::to_string(self_id) + " differs from this session's rank " +
                                   std::to_string(ctrl->rank()));
      return;
    }
    CtrlOptions co = opts.ctrl;
    if (!uds_dir.empty()) co.uds_dir = uds_dir;
    if (!opts.auth_key.empty()) co.auth_key = opts.auth_key;
    co.authenticate = opts.authenticate && co.authenticate;
    ctrl = std::make_unique<CtrlChannel>(loop, self_id, co);
    std::weak_ptr<SessionImpl> weak = weak_from_this();
    ctrl->set_handlers(CtrlHandlers{
        [weak](std::uint32_t rank, bool up) {
          auto self = weak.lock();
          if (!self) return;
          if (up) return self->peer_up(rank);
          const std::string why = self->ctrl->lost_reason(rank);
          self->peer_down(rank, "its control connection ended" + (why.empty() ? std::string() : ": " + why));
        },
        [weak](std::uint32_t rank, CtrlMessage m) {
          if (auto self = weak.lock()) self->peer_info(rank, m);
        }});
  }

  // A control connection came up: send the peer what it needs to reach our buffer.
  void peer_up(std::uint32_t rank) {
    if (closed || !transport) return;
    linked[rank] = Loss{};
    lost.erase(rank);
    const auto info = transport->local_info(rank, LocalAddress{ctrl->rank(), advertised_ip, data_port, bind_ip});
    ctrl->async_send(rank, CtrlMessage::from_transport(info), [rank](std::exception_ptr e) {
      if (e) log().warn("could not send the data-plane peer info to rank {}", rank);
    });
  }

  // The control fast path. After its endpoint is up, a sender sends SWITCH on the socket and every
  // later control message as a UCX active message; the receiver holds active messages that overtake
  // the SWITCH until it reads it, so the order the sender chose is the order ctrl_recv sees.
  static constexpr std::array<std::byte, 4> kSwitch{std::byte{'H'}, std::byte{'M'}, std::byte{'C'}, std::byte{'S'}};

  // `rank` is who the transport identified by its secret, never what the message claims.
  void fast_message(std::uint32_t rank, std::span<const std::byte> bytes) {
    if (!ctrl) return;
    std::optional<CtrlMessage> m = decode_fast_message(bytes, opts.ctrl.max_frame_length);
    if (!m) {
      log().error("rank {} sent a malformed fast-path control message; disconnecting it", rank);
      return peer_down(rank, "it sent a malformed fast-path control message and was disconnected");
    }
    ++fast_received[rank];
    if (fast_recv.count(rank) != 0) {
      if (!ctrl->deliver(rank, std::move(*m))) return outran(rank);
    } else {
      // Held until the SWITCH: bounded per peer and over all peers, in messages and in bytes.
      Early& e = fast_early[rank];
      const std::size_t size = m->bytes().size();
      if (e.messages.size() >= kMaxEarly || e.bytes + size > opts.ctrl.inbox_budget ||
          early_bytes + size > opts.ctrl.total_inbox_budget) {
        log().error("rank {} sent over {} fast-path messages or {} bytes before its SWITCH; disconnecting it", rank,
                    kMaxEarly, opts.ctrl.inbox_budget);
        return peer_down(rank, "it sent too many fast-path messages before its SWITCH and was disconnected");
      }
      e.bytes += size;
      early_bytes += size;
      e.messages.push_back(std::move(*m));
    }
    if (departing.count(rank) != 0) depart_when_ready(rank);
  }

  void fast_switch(std::uint32_t rank) {
    fast_recv.insert(rank);
    auto early = take_early(rank);
    for (auto& m : early)
      if (!ctrl->deliver(rank, std::move(m))) return outran(rank);
  }

  std::vector<CtrlMessage> take_early(std::uint32_t rank) {
    auto it = fast_early.find(rank);
    if (it == fast_early.end()) return {};
    early_bytes -= std::min(early_bytes, it->second.bytes);
    std::vector<CtrlMessage> out = std::move(it->second.messages);
    fast_early.erase(it);
    return out;
  }

  // The fast path cannot be paused as the socket can: a sender that keeps it full is cut off.
  void outran(std::uint32_t rank) {
    log().error("rank {}'s fast-path control messages outran ctrl_recv by twice the inbox budget; disconnecting it",
                rank);
    peer_down(rank, "its control messages outran ctrl_recv by twice the inbox budget (CtrlOptions::inbox_budget, "
                    "total_inbox_budget) and it was disconnected");
  }

  // The peer's data-plane info arrived (before any later control message of theirs): connect to it.
  // A second one for a live peer is a protocol violation: it would tear down a working connection
  // (and its operations) on the peer's say-so, so the offender is disconnected instead.
  void peer_info(std::uint32_t rank, const CtrlMessage& m) {
    if (m.bytes().size() == kBye.size() + 8 && std::equal(kBye.begin(), kBye.end(), m.bytes().begin()))
      return bye(rank, detail::load_le64(m.bytes().data() + kBye.size()));
    if (closed || !transport) return;
    if (m.bytes().size() == kSwitch.size() && std::equal(kSwitch.begin(), kSwitch.end(), m.bytes().begin()))
      return fast_switch(rank);
    if (transport->peer(rank) == nullptr) transport->set_peer_host(rank, ctrl->remote_host(rank));
    std::string why = transport->peer(rank) != nullptr ? "a second peer info for a live connection"
                                                        : transport->add_peer(rank, m.bytes());
    if (!why.empty()) {
      log().error("data connection to rank {} failed: {}; dropping the peer", rank, why);
      return peer_down(rank, "its data connection failed: " + why);
    }
  }

  // The transport's connection to `rank` is established (after peer_info): operations and the
  // fast path may use it now. Nothing runs on a half-made UCX connection (docs/session.md).
  void peer_ready(std::uint32_t rank) {
    if (closed || !ctrl) return;
    // Its names, for a loss noted after the transport has dropped its record.
    if (auto l = linked.find(rank); l != linked.end()) {
      if (const PeerRecord* p = transport ? transport->peer(rank) : nullptr) {
        l->second.ip = p->ip;
        l->second.data_port = p->data_port;
      }
    }
    ready.set(rank);
    wake_address_waiters();
    if (opts.fast_ctrl) {
      ctrl->async_send(rank, CtrlMessage::from_transport(kSwitch), [](std::exception_ptr) {});
      fast_send.insert(rank);  // every later ctrl_send to rank: sent after the SWITCH, over UCX
    }
  }

  // `how` names the loss in the PeerLostError of later operations (the first reason counts).
  void peer_down(std::uint32_t rank, const std::string& how) {
    note_loss(rank, how);
    ready.fail(rank, make_error_code(Status::PEER_LOST));
    fast_send.erase(rank);
    fast_recv.erase(rank);
    (void)take_early(rank);
    fast_sent.erase(rank);
    fast_received.erase(rank);
    bye_seen.erase(rank);
    departing.erase(rank);
    if (goodbye_waiting.erase(rank) != 0) maybe_finish_close();
    dialed.erase(rank);
    if (transport) transport->remove_peer(rank, make_error_code(Status::PEER_LOST));
    if (ctrl) ctrl->disconnect(rank);
  }

  // After a connect() to `ip`: the peer must serve the data port the caller named (the reference
  // API names peers by (ip, data_port); another port would make later lookups miss or, worse, hit
  // another peer), and it is known by that ip from now on.
  void connected(std::uint32_t rank, const std::string& ip, std::optional<std::uint16_t> port) {
    const PeerRecord* p = transport ? transport->peer(rank) : nullptr;
    if (p == nullptr) throw PeerLostError("connect to " + ip + ": rank " + std::to_string(rank) + " went away");
    if (port && p->data_port != *port) {
      const std::uint16_t served = p->data_port;
      peer_down(rank, "connect() found it serves data port " + std::to_string(served) + ", not " +
                          std::to_string(*port));
      throw InvalidArgumentError("the session at " + ip + " (rank " + std::to_string(rank) + ") serves data port " +
                                 std::to_string(served) + ", not " + std::to_string(*port));
    }
    dialed[rank] = ip;
    wake_address_waiters();
  }

  // Connected ranks known as `ip` (advertised, or the address connect() dialled) and, when given,
  // `port` (advertised data port). Entries go with their peer.
  std::vector<std::uint32_t> ranks_named(const std::string& ip, std::optional<std::uint16_t> port) const {
    std::vector<std::uint32_t> out;
    if (!transport) return out;
    for (std::uint32_t rank : transport->ranks()) {
      const PeerRecord* p = transport->peer(rank);
      auto d = dialed.find(rank);
      const bool ip_matches = p->ip == ip || (d != dialed.end() && d->second == ip);
      if (ip_matches && (!port || *port == p->data_port) && ready.is_ready(rank)) out.push_back(rank);
    }
    return out;
  }

  // The one peer named (ip, port), or why not: NotConnectedError when none is, InvalidArgumentError
  // naming every match when several are.
  std::exception_ptr resolve(const std::string& ip, std::optional<std::uint16_t> port, std::uint32_t& rank) const {
    const std::vector<std::uint32_t> ranks = ranks_named(ip, port);
    if (ranks.size() == 1) {  // Python's put_remote(ip, ...) resolves per call: no name built for it
      rank = ranks.front();
      return nullptr;
    }
    const std::string name = port ? ip + ":" + std::to_string(*port) : ip;
    if (ranks.empty()) {
      for (const auto& [r, l] : lost)
        if ((l.ip == ip || l.dialed == ip) && (!port || *port == l.data_port) && transport &&
            transport->peer(r) == nullptr)
          return std::make_exception_ptr(PeerLostError("no connected peer at " + name + ": " + lost_text(r, l)));
      return std::make_exception_ptr(NotConnectedError("no connected peer at " + name));
    }
    std::string list;
    for (std::uint32_t r : ranks) {
      const PeerRecord* p = transport->peer(r);
      list += (list.empty() ? "" : ", ") + ("rank " + std::to_string(r) + " (" + p->ip + ":" +
                                            std::to_string(p->data_port) + ")");
    }
    return std::make_exception_ptr(InvalidArgumentError(std::to_string(ranks.size()) + " peers match " + name + ": " +
                                                        list + "; name one by rank" +
                                                        (port ? "" : " or by ip:port")));
  }

  // A caller waiting for a peer at an address to connect (a server naming a client by its ip).
  using AddressHandler = runtime::asio::any_completion_handler<void(std::exception_ptr, std::uint32_t)>;
  struct AddressWaiter {
    std::string ip;
    std::optional<std::uint16_t> port;
    AddressHandler handler;
    std::unique_ptr<runtime::asio::steady_timer> timer;
  };

  void wait_address(const std::string& ip, std::optional<std::uint16_t> port, std::chrono::milliseconds timeout,
                    AddressHandler h) {
    std::uint32_t rank = 0;
    std::exception_ptr e = resolve(ip, port, rank);
    if (e && closed) e = std::make_exception_ptr(ClosedError("waiting for a peer at " + ip + " on a closed session"));
    if (!e || closed || !ranks_named(ip, port).empty())
      return runtime::asio::post(loop.executor(), runtime::asio::append(std::move(h), e, rank));
    const std::uint64_t id = next_waiter++;
    // Constructed in place: any_completion_handler's move assignment recurses in Boost 1.81.
    auto& w = address_waiters
                  .try_emplace(id, AddressWaiter{ip, port, std::move(h),
                                                 std::make_unique<runtime::asio::steady_timer>(loop.executor())})
                  .first->second;
    w.timer->expires_after(timeout);
    w.timer->async_wait([weak = weak_from_this(), id, ip, port, timeout](runtime::error_code ec) {
      auto self = weak.lock();
      if (ec || !self) return;  // woken by a peer, or the session is gone
      const std::string name = port ? ip + ":" + std::to_string(*port) : ip;
      self->finish_waiter(id, std::make_exception_ptr(TimeoutError(
                                  "no peer at " + name + " connected within " + std::to_string(timeout.count()) + " ms")),
                          0);
    });
  }

  // A peer became usable or got a name: the waiters it satisfies (or makes ambiguous) complete.
  void wake_address_waiters() {
    std::vector<std::uint64_t> ids;
    for (const auto& [id, w] : address_waiters)
      if (!ranks_named(w.ip, w.port).empty()) ids.push_back(id);
    for (std::uint64_t id : ids) {
      const AddressWaiter& w = address_waiters.at(id);
      std::uint32_t rank = 0;
      std::exception_ptr e = resolve(w.ip, w.port, rank);
      finish_waiter(id, e, rank);
    }
  }

  void finish_waiter(std::uint64_t id, std::exception_ptr e, std::uint32_t rank) {
    auto it = address_waiters.find(id);
    if (it == address_waiters.end()) return;
    AddressWaiter w = std::move(it->second);
    address_waiters.erase(it);
    w.timer->cancel();
    runtime::asio::post(loop.executor(), runtime::asio::append(std::move(w.handler), e, rank));
  }

  // Checks an operation before anything is sent; the exception says what to fix.
  std::exception_ptr validate(bool is_put, std::uint32_t rank, std::uint64_t region, std::span<const Segment> segs,
                              std::size_t chunk, std::size_t window, bool pipeline) const {
    const char* op = is_put ? "put" : "get";
    auto fail = [&](auto error) { return std::make_exception_ptr(error); };
    if (closed) return fail(ClosedError(std::string(op) + " on a closed session"));
    // A peer whose wireup is still going on takes operations (UCX queues them): a put issued
    // after a ctrl_recv from that peer must find it, and that message may overtake our wireup.
    const PeerRecord* peer = transport ? transport->peer(rank) : nullptr;
    if (peer == nullptr) {
      if (auto l = lost.find(rank); l != lost.end())
        return fail(PeerLostError(std::string(op) + ": " + lost_text(rank, l->second)));
      return fail(NotConnectedError(std::string(op) + ": no data connection to rank " + std::to_string(rank) +
                                    " (connect() to it, or wait_peer() for a client)"));
    }
    if (segs.empty()) return fail(InvalidArgumentError(std::string(op) + ": empty segment list"));
    if (region == kForeignRegion)
      return fail(InvalidArgumentError(std::string(op) + ": the registered memory belongs to another session"));
    const std::size_t local_size = transport->region_size(region);
    if (local_size == 0) return fail(InvalidArgumentError(std::string(op) + ": the registered memory was released"));
    if (pipeline && (chunk == 0 || window == 0))
      return fail(InvalidArgumentError(std::string(op) + " pipeline: chunk and max_inflight must be > 0"));
    for (const Segment& s : segs) {
      if (s.size == 0) return fail(InvalidArgumentError(std::string(op) + ": size must be > 0"));
      if (s.local_offset > local_size || s.size > local_size - s.local_offset)
        return fail(OutOfRangeError(std::string(op) + ": local range [" + std::to_string(s.local_offset) + ", +" +
                                    std::to_string(s.size) + ") is outside the " +
                                    (region == 0 ? "session buffer" : "registered memory") + " of " +
                                    std::to_string(local_size) + " bytes" +
                                    (region == 0 ? " (a larger buffer_size, or register the memory to move)" : "")));
      if (s.remote_offset > peer->buffer_size || s.size > peer->buffer_size - s.remote_offset)
        return fail(OutOfRangeError(std::string(op) + ": remote range [" + std::to_string(s.remote_offset) + ", +" +
                                    std::to_string(s.size) + ") is outside rank " + std::to_string(rank) +
                                    "'s buffer of " + std::to_string(peer->buffer_size) + " bytes"));
    }
    return nullptr;
  }

  // Graceful close (docs/session.md "Closing"). The closer flushes what it sent to each peer, then
  // says BYE with the number of fast-path messages it sent; an open peer flushes its side, waits
  // for those messages, drops the data connection and answers BYE. Connections are torn down only
  // once every peer answered (or was lost, or kGoodbyeBudget passed): nobody's flush meets a
  // vanished peer, and no message is overtaken by the closing control socket.
  void start_close(Session::handler h) {
    if (close_done) return runtime::complete_later(loop.executor(), std::move(h), std::exception_ptr{});
    close_waiters.push_back(std::move(h));
    if (closing) return;
    closing = true;
    stop_admitting();
    if (!ctrl) return close_on_loop();
    goodbye_timer = std::make_unique<runtime::asio::steady_timer>(loop.executor(), kGoodbyeBudget);
    goodbye_timer->async_wait([weak = weak_from_this()](runtime::error_code ec) {
      auto self = weak.lock();
      if (ec || !self || self->goodbye_timer == nullptr) return;
      log().info("close: {} peer(s) did not answer the goodbye within {} ms", self->goodbye_waiting.size(),
                 kGoodbyeBudget.count());
      self->close_on_loop();
    });
    for (std::uint32_t rank : ctrl->peers()) {
      if (bye_seen.count(rank) == 0) goodbye_waiting.insert(rank);
      ++goodbye_unsent;
      flush_then(rank, [weak = weak_from_this(), rank] {
        if (auto self = weak.lock()) self->send_bye(rank, [weak] {
          if (auto s = weak.lock(); s && s->goodbye_unsent > 0) {
            --s->goodbye_unsent;
            s->maybe_finish_close();
          }
        });
      });
    }
    maybe_finish_close();
  }

  // No new operation, peer or waiter from here; waiters for a peer fail now.
  void stop_admitting() {
    if (closed) return;
    closed = true;
    ready.close(make_error_code(Status::CLOSED));
    while (!address_waiters.empty())
      finish_waiter(address_waiters.begin()->first,
                    std::make_exception_ptr(ClosedError("the session closed while waiting for a peer")), 0);
  }

  // Posted: this may run inside a transport callback (a peer failed), which must not destroy it.
  void maybe_finish_close() {
    if (!closing || goodbye_timer == nullptr || !goodbye_waiting.empty() || goodbye_unsent != 0) return;
    runtime::asio::post(loop.executor(), [weak = weak_from_this()] {
      if (auto self = weak.lock(); self && !self->close_done) self->close_on_loop();
    });
  }

  // Immediate close: what is still in flight fails with ClosedError. Waiters hear of it once.
  void close_on_loop() {
    stop_admitting();
    close_done = true;
    goodbye_timer.reset();
    goodbye_waiting.clear();
    departing.clear();
    if (ctrl) ctrl->close();
    transport.reset();  // fails what is in flight with ClosedError and closes every endpoint
    for (auto& h : std::exchange(close_waiters, {}))
      runtime::complete_later(loop.executor(), std::move(h), std::exception_ptr{});
  }

  // Runs `then` once everything sent to `rank` so far is complete at the peer (at once without a
  // data connection; also when the flush fails: the peer is then gone or going).
  void flush_then(std::uint32_t rank, std::function<void()> then) {
    if (!transport || transport->peer(rank) == nullptr || !ready.is_ready(rank)) return then();
    OpRequest flush;
    flush.rank = rank;
    flush.kind = OpKind::flush;
    transport->submit(flush, [then = std::move(then)](runtime::error_code) { then(); });
  }

  void send_bye(std::uint32_t rank, std::function<void()> sent) {
    std::array<std::byte, kBye.size() + 8> wire{};
    std::copy(kBye.begin(), kBye.end(), wire.begin());
    auto it = fast_sent.find(rank);
    detail::store_le64(wire.data() + kBye.size(), it == fast_sent.end() ? 0 : it->second);
    fast_send.erase(rank);  // nothing may follow the BYE on the fast path
    ctrl->async_send(rank, CtrlMessage::from_transport(wire), [sent = std::move(sent)](std::exception_ptr) { sent(); });
  }

  // A peer's BYE: its answer to ours, or its own close. One per connection; more are ignored.
  void bye(std::uint32_t rank, std::uint64_t fast_messages) {
    if (!bye_seen.insert(rank).second) return;
    log().debug("rank {} says goodbye after {} fast-path messages", rank, fast_messages);
    if (closing) {
      if (goodbye_waiting.erase(rank) != 0) maybe_finish_close();
      return;
    }
    if (closed || !ctrl) return;
    Departure& d = departing[rank];
    d.expected = fast_messages;
    d.timer = std::make_unique<runtime::asio::steady_timer>(loop.executor(), kGoodbyeBudget);
    d.timer->async_wait([weak = weak_from_this(), rank](runtime::error_code ec) {
      auto self = weak.lock();
      if (ec || !self || self->departing.count(rank) == 0) return;
      log().warn("rank {} said goodbye but {} of its fast-path messages never came", rank,
                 self->departing.at(rank).expected - self->fast_received[rank]);
      self->depart(rank);
    });
    flush_then(rank, [weak = weak_from_this(), rank] {
      auto self = weak.lock();
      if (!self || self->departing.count(rank) == 0) return;
      self->departing.at(rank).flushed = true;
      self->depart_when_ready(rank);
    });
  }

  void depart_when_ready(std::uint32_t rank) {
    const Departure& d = departing.at(rank);
    if (d.flushed && fast_received[rank] >= d.expected) depart(rank);
  }

  // Everything the departing peer sent has arrived and ours to it is flushed: drop its data
  // connection (its control connection ends when it closes) and answer, which lets it close.
  void depart(std::uint32_t rank) {
    note_loss(rank, "it closed its session (it said goodbye)");
    departing.erase(rank);
    ready.fail(rank, make_error_code(Status::PEER_LOST));
    if (transport) transport->remove_peer(rank, make_error_code(Status::PEER_LOST));
    if (ctrl) send_bye(rank, [] {});
  }

  // A peer whose control connection came up and then went: how, and the names it had, so that
  // later operations and lookups say PeerLostError with the reason instead of "not connected".
  // The newest kMaxLost only: a server whose clients come and go must not grow it forever.
  struct Loss {
    std::string how;
    std::string ip, dialed;  // advertised and dialled addresses
    std::uint16_t data_port = 0;
    std::uint64_t seq = 0;   // which entry of lost_order is this one's
  };
  static constexpr std::size_t kMaxLost = 1024;

  void note_loss(std::uint32_t rank, const std::string& how) {
    auto up = linked.find(rank);
    if (up == linked.end()) return;  // never connected, or its loss is already noted
    Loss l = std::move(up->second);
    linked.erase(up);
    l.how = how;
    l.seq = ++loss_seq;
    if (auto d = dialed.find(rank); d != dialed.end()) l.dialed = d->second;
    lost[rank] = std::move(l);
    lost_order.emplace_back(rank, loss_seq);
    while (lost_order.size() > kMaxLost) {
      auto [old, seq] = lost_order.front();
      lost_order.pop_front();
      if (auto it = lost.find(old); it != lost.end() && it->second.seq == seq) lost.erase(it);
    }
  }

  static std::string lost_text(std::uint32_t rank, const Loss& l) {
    return "rank " + std::to_string(rank) + " was lost: " + l.how +
           " (connect() to it again, or wait_peer() for a client that comes back)";
  }

  runtime::EventLoop& loop;
  SessionOptions opts;
  std::shared_ptr<UcxContext> ucx_context;
  std::unique_ptr<ConnBuffer> buffer;
  std::unique_ptr<CtrlChannel> ctrl;
  std::unique_ptr<Transport> transport;
  ConnType conn = ConnType::UCX;  // what `transport` is
  runtime::AsyncReadySet<std::uint32_t> ready;  // ranks with a usable data connection
  std::map<std::uint32_t, std::string> dialed;  // rank -> the ip connect() reached it at
  std::map<std::uint64_t, AddressWaiter> address_waiters;  // one per blocked caller: bounded by callers
  std::uint64_t next_waiter = 0;
  std::set<std::uint32_t> fast_send, fast_recv;             // ranks whose control messages use the fast path
  struct Early {
    std::vector<CtrlMessage> messages;
    std::size_t bytes = 0;
  };
  std::map<std::uint32_t, Early> fast_early;  // fast-path messages that overtook the SWITCH
  std::size_t early_bytes = 0;                // over every peer's Early
  static constexpr std::size_t kMaxEarly = 4096;  // a sender cannot make us hold more
  std::map<std::uint32_t, Loss> linked;  // ranks whose control connection is up, with their names once ready
  std::map<std::uint32_t, Loss> lost;
  std::deque<std::pair<std::uint32_t, std::uint64_t>> lost_order;  // (rank, seq), oldest first
  std::uint64_t loss_seq = 0;
  std::string advertised_ip;
  std::string bind_ip;  // where init_server bound the control listener; empty for a client
  std::uint16_t data_port = 0;
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
  std::unique_ptr<runtime::asio::steady_timer> goodbye_timer;
  std::vector<Session::handler> close_waiters;
};

}  // namespace detail

namespace {

// A transport completion for the caller: the typed exception (its text built only on failure, so
// nothing is allocated on the hot path), then the handler run on its own executor. Transports run
// completions from a post of their own (never inside the code that found the result), so on the
// loop's own executor the handler is called directly: what dispatch would do, without going
// through the type-erased executor (about half of an 8 B put's CPU at depth 64 on shm).
template <class Context>
detail::Transport::Completion to_caller(runtime::loop_executor ex, Session::handler h, Context context) {
  return [ex, h = std::move(h), context](runtime::error_code ec) mutable {
    std::exception_ptr e;
    if (ec) e = make_error(ec, context());
    const auto target = runtime::asio::get_associated_executor(h, ex);  // before h is moved from
    if (ex.running_in_this_thread() && runtime::is_loop_executor(target, ex)) return std::move(h)(e);
    runtime::asio::dispatch(target, runtime::asio::append(std::move(h), e));
  };
}

void forbid_loop_thread(const runtime::EventLoop& loop, const char* what) {
  if (loop.in_loop_thread())
    throw InvalidArgumentError(std::string(what) + " blocks: call it off the HMC loop thread (or co_await async_*)");
}

// Waits for a blocking call's operation; a caller-driven loop is driven by this thread meanwhile.
template <class T>
T wait_for(runtime::EventLoop& loop, std::future<T> f, std::chrono::milliseconds timeout, const std::string& what) {
  if (!loop.wait(f, runtime::deadline_after(timeout)))
    throw TimeoutError(what + " not complete after " + std::to_string(timeout.count()) + " ms");
  return f.get();
}

// Starts a blocking call's operation with start(callback) and waits for it: a OneShot, not a
// std::future (whose set_value costs a futex call per operation); a caller-driven loop is driven
// by this thread meanwhile. Shared with the callback: a timed-out wait leaves the operation running.
template <class Start>
void wait_op(runtime::EventLoop& loop, std::chrono::milliseconds timeout, const char* what, Start start) {
  const auto deadline = runtime::deadline_after(timeout);
  auto done = std::make_shared<runtime::OneShot>();
  start([done](std::exception_ptr e) { done->set(std::move(e)); });
  if (!loop.wait(*done, deadline))
    throw TimeoutError(std::string(what) + " not complete after " + std::to_string(timeout.count()) + " ms");
  if (done->error()) std::rethrow_exception(done->error());
}

// A wait allows a little more than the operation's own deadline, so that the operation's own
// TimeoutError (with its context) is what the caller sees; saturating, for "no limit".
std::chrono::milliseconds with_grace(std::chrono::milliseconds d) {
  constexpr std::chrono::milliseconds grace{1000};
  return d > std::chrono::milliseconds::max() - grace ? std::chrono::milliseconds::max() : d + grace;
}

std::chrono::milliseconds wait_budget(const SessionOptions& o) { return with_grace(o.timeout); }

// While a connect() waits, a warning every kConnectNotice says for whom and at what stage, so that
// a user whose peer is not running sees why nothing happens instead of silence until the timeout.
class ConnectNotice {
 public:
  static constexpr std::chrono::seconds kConnectNotice{5};

  ConnectNotice(runtime::EventLoop& loop, std::string whom, std::chrono::milliseconds budget)
      : loop_(loop), state_(std::make_shared<State>(loop.executor(), std::move(whom), budget)) {
    loop_.call([s = state_] { arm(s); });
  }
  ~ConnectNotice() {
    try {
      loop_.call([s = state_] {
        s->over = true;
        s->timer.cancel();
      });
    } catch (const std::exception& e) {
      detail::log().debug("connect notice: {}", e.what());
    }
  }
  ConnectNotice(const ConnectNotice&) = delete;
  ConnectNotice& operator=(const ConnectNotice&) = delete;

  void control_connected() noexcept { state_->control_up = true; }

 private:
  struct State {
    State(runtime::loop_executor ex, std::string w, std::chrono::milliseconds b)
        : timer(ex), whom(std::move(w)), budget(b) {}
    runtime::asio::steady_timer timer;
    std::string whom;
    std::chrono::milliseconds budget;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    std::atomic<bool> control_up{false};
    bool over = false;  // loop thread only
  };

  static void arm(const std::shared_ptr<State>& s) {
    s->timer.expires_after(kConnectNotice);
    s->timer.async_wait([s](runtime::error_code ec) {
      if (ec || s->over) return;
      const auto waited = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - s->start);
      detail::log().warn("connect: still connecting to {} ({} s of {} s): {}", s->whom, waited.count(),
                         std::chrono::ceil<std::chrono::seconds>(s->budget).count(),
                         s->control_up ? "the control connection is up; waiting for the data connection"
                                       : "no control connection yet (is the peer running, and listening on that "
                                         "port?)");
      arm(s);
    });
  }

  runtime::EventLoop& loop_;
  std::shared_ptr<State> state_;
};

}  // namespace

Session::Session(SessionOptions options) {
  runtime::EventLoopOptions lo;
  lo.mode = options.progress_mode;
  loop_ = std::make_unique<runtime::EventLoop>(lo);
  if (options.progress_thread == ProgressThread::own) loop_->start();
  if (options.progress_thread == ProgressThread::shared) loop_->start_keeper();
  impl_ = std::make_shared<detail::SessionImpl>(*loop_, std::move(options));
  loop_->call([&] { impl_->start_on_loop(); });
  conn_type_ = impl_->opts.conn_type;
}

Session::~Session() {
  alive_.reset();  // RegisteredMemory handles that outlive us do nothing
  close();
  // From a completion handler on our own loop the loop's run() is on the stack: the loop and the
  // impl are then destroyed on this thread once that run() returns (docs/architecture.md).
  runtime::EventLoop::destroy(std::move(loop_), std::move(impl_));
}

ConnBuffer& Session::buffer() noexcept { return *impl_->buffer; }
const SessionOptions& Session::options() const noexcept { return impl_->opts; }
runtime::loop_executor Session::executor() const noexcept { return loop_->executor(); }
runtime::EventLoop& Session::event_loop() const noexcept { return *loop_; }

void Session::init_server(const std::string& bind_ip, std::uint16_t ucx_port, std::uint16_t rdma_port,
                          std::uint16_t ctrl_tcp_port, std::uint32_t self_id, const std::string& ctrl_uds_dir) {
  loop_->call([&] {
    if (impl_->closed) throw ClosedError("init_server on a closed session");
    if (rdma_port != 0 && ucx_port == 0) impl_->use_conn(ConnType::RDMA, "init_server");
    conn_type_ = impl_->conn;
    const bool rdma = impl_->conn == ConnType::RDMA;
    // The reference's servers pass both ports; a session serves one transport and says which.
    if (!rdma && rdma_port != 0)
      detail::log().info("rdma_port {} ignored: this session serves UCX on ucx_port {} (one transport per "
                         "session: create it with conn_type RDMA, or pass only an rdma_port, to serve RDMA)",
                         rdma_port, ucx_port);
    impl_->ensure_ctrl(self_id, ctrl_uds_dir);
    impl_->advertised_ip = bind_ip == "0.0.0.0" ? impl_->opts.local_ip : bind_ip;
    impl_->bind_ip = bind_ip;
    impl_->data_port = rdma && rdma_port != 0 ? rdma_port : ucx_port;
  });
  const std::uint16_t bound = impl_->ctrl->listen(bind_ip, ctrl_tcp_port);
  loop_->call([&] { impl_->ctrl_port = bound; });
}

void Session::init_server(const std::string& ip, std::uint16_t ctrl_port, ConnType conn) {
  loop_->call([&] {
    if (impl_->closed) throw ClosedError("init_server on a closed session");
    impl_->use_conn(conn, "init_server");
    conn_type_ = impl_->conn;
    impl_->ensure_ctrl(0, {});
    impl_->advertised_ip = ip == "0.0.0.0" ? impl_->opts.local_ip : ip;
    impl_->bind_ip = ip;
    impl_->data_port = ctrl_port;  // the one public port is also how clients name this session
  });
  const std::uint16_t bound = impl_->ctrl->listen(ip, ctrl_port);
  loop_->call([&] { impl_->ctrl_port = impl_->data_port = bound; });
}

void Session::close_server() {
  loop_->call([&] {
    if (impl_->ctrl) impl_->ctrl->stop_listening();
  });
}

void Session::set_local_ip(const std::string& ip) {
  if (ip.empty() || ip == "0.0.0.0")
    throw InvalidArgumentError("set_local_ip: '" + ip + "' is not an address peers can reach");
  loop_->call([&] {
    if (impl_->closed) throw ClosedError("set_local_ip on a closed session");
    impl_->opts.local_ip = ip;
  });
}

std::uint32_t Session::rank() const {
  return loop_->call([&] {
    if (!impl_->ctrl || impl_->ctrl->rank() == CtrlChannel::any_rank)
      throw NotConnectedError("rank: not assigned yet; call init_server() or connect() first");
    return impl_->ctrl->rank();
  });
}

std::uint16_t Session::ctrl_port() const {
  return loop_->call([&]() -> std::uint16_t {
    if (impl_->ctrl_port == 0) throw NotConnectedError("ctrl_port: init_server() was not called");
    return impl_->ctrl_port;
  });
}

std::uint32_t Session::connect(std::uint32_t peer_id, std::uint32_t self_id, const std::string& peer_ip,
                               std::uint16_t data_port, std::uint16_t ctrl_tcp_port, ConnType conn,
                               std::optional<std::chrono::milliseconds> timeout) {
  forbid_loop_thread(*loop_, "connect");
  loop_->call([&] {
    if (impl_->closed) throw ClosedError("connect on a closed session");
    impl_->use_conn(conn, "connect");
    conn_type_ = impl_->conn;
    impl_->ensure_ctrl(self_id, {});
    if (impl_->advertised_ip.empty()) impl_->advertised_ip = impl_->opts.local_ip;
  });
  return dial(peer_ip, ctrl_tcp_port, peer_id, data_port, timeout);
}

std::uint32_t Session::connect(const std::string& ip, std::uint16_t ctrl_port, ConnType conn,
                               std::optional<std::chrono::milliseconds> timeout) {
  forbid_loop_thread(*loop_, "connect");
  loop_->call([&] {
    if (impl_->closed) throw ClosedError("connect on a closed session");
    impl_->use_conn(conn, "connect");
    conn_type_ = impl_->conn;
    impl_->ensure_ctrl(CtrlChannel::any_rank, {});
    if (impl_->advertised_ip.empty()) impl_->advertised_ip = impl_->opts.local_ip;
  });
  return dial(ip, ctrl_port, std::nullopt, std::nullopt, timeout);  // known by the dialled ip; any data port
}

// Both connect() forms once the control channel exists: the control connection, then the data
// connection, within one timeout.
std::uint32_t Session::dial(const std::string& ip, std::uint16_t ctrl_port, std::optional<std::uint32_t> peer_id,
                            std::optional<std::uint16_t> data_port, std::optional<std::chrono::milliseconds> timeout) {
  const std::chrono::milliseconds budget = timeout.value_or(options().timeout);
  if (budget.count() <= 0)
    throw InvalidArgumentError("connect: timeout must be > 0 ms, not " + std::to_string(budget.count()));
  const auto deadline = runtime::deadline_after(budget);
  const std::string where = ip + ":" + std::to_string(ctrl_port);
  ConnectNotice notice(*loop_, (peer_id ? "rank " + std::to_string(*peer_id) : std::string("the server")) + " at " +
                                   where, budget);
  const std::uint32_t rank =
      wait_for(*loop_, impl_->ctrl->async_connect(ip, ctrl_port, budget, runtime::asio::use_future),
               with_grace(budget), "connect to " + where);
  if (peer_id && rank != *peer_id) {
    impl_->ctrl->disconnect(rank);
    throw InvalidArgumentError("the session at " + where + " is rank " + std::to_string(rank) + ", not peer_id " +
                               std::to_string(*peer_id));
  }
  notice.control_connected();
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  wait_ready(rank, std::max(left, std::chrono::milliseconds(1)), true);
  loop_->call([&] { impl_->connected(rank, ip, data_port); });
  return rank;
}

void Session::wait_peer(std::uint32_t rank, std::chrono::milliseconds timeout) { wait_ready(rank, timeout, false); }

// dialled: connect() waits for the data connection of a control connection it made; if that
// connection is gone already (its data connection was refused), waiting could only time out.
void Session::wait_ready(std::uint32_t rank, std::chrono::milliseconds timeout, bool dialled) {
  forbid_loop_thread(*loop_, "wait_peer");
  auto f = runtime::async_on_loop<void(std::exception_ptr)>(
      executor(), runtime::asio::use_future, [impl = impl_, rank, timeout, dialled](handler h) mutable {
        if (dialled && !impl->ready.is_ready(rank) && impl->ctrl) {
          const std::vector<std::uint32_t> up = impl->ctrl->peers();
          if (std::find(up.begin(), up.end(), rank) == up.end())
            return runtime::complete_later(
                impl->loop.executor(), std::move(h),
                std::make_exception_ptr(PeerLostError("the data connection to rank " + std::to_string(rank) +
                                                      " failed while connecting (its reason is in the log)")));
        }
        impl->ready.async_wait(rank, timeout, [impl, rank, h = std::move(h)](runtime::error_code ec) mutable {
          runtime::complete_later(impl->loop.executor(), std::move(h),
                                  ec ? make_error(ec, "waiting for a data connection to rank " + std::to_string(rank))
                                     : nullptr);
        });
      });
  wait_for(*loop_, std::move(f), timeout + std::chrono::seconds(1), "wait_peer");
}

std::vector<std::uint32_t> Session::peers() const {
  return loop_->call([&] { return impl_->transport ? impl_->transport->ranks() : std::vector<std::uint32_t>{}; });
}

std::uint32_t Session::resolve_peer(const std::string& ip, std::optional<std::uint16_t> data_port) const {
  return loop_->call([&] {
    std::uint32_t rank = 0;
    if (std::exception_ptr e = impl_->resolve(ip, data_port, rank)) std::rethrow_exception(e);
    return rank;
  });
}

std::uint32_t Session::wait_peer_at(const std::string& ip, std::optional<std::uint16_t> data_port,
                                    std::chrono::milliseconds timeout) {
  forbid_loop_thread(*loop_, "wait_peer_at");
  auto f = runtime::async_on_loop<void(std::exception_ptr, std::uint32_t)>(
      executor(), runtime::asio::use_future,
      [impl = impl_, ip, data_port, timeout](detail::SessionImpl::AddressHandler h) mutable {
        impl->wait_address(ip, data_port, timeout, std::move(h));
      });
  return wait_for(*loop_, std::move(f), timeout + std::chrono::seconds(1), "wait_peer_at " + ip);
}

std::vector<MemoryType> Session::native_memory_types() const {
  return loop_->call([&] { return impl_->staging_options(impl_->conn).native; });
}

bool Session::buffer_staged() const {
  return loop_->call([&] {
    const auto* staging = dynamic_cast<const detail::StagingTransport*>(impl_->transport.get());
    return staging != nullptr && staging->buffer_staged();
  });
}

std::string Session::transports(std::uint32_t rank) const {
  return loop_->call([&] {
    if (!impl_->transport || impl_->transport->peer(rank) == nullptr)
      throw NotConnectedError("no data connection to rank " + std::to_string(rank));
    return impl_->transport->carriers(rank);
  });
}

void Session::start_rma_on_loop(const std::shared_ptr<detail::SessionImpl>& impl, bool is_put, bool pipeline,
                                std::uint32_t peer, std::uint64_t region, std::span<const Segment> segments,
                                std::size_t chunk, std::size_t window, handler h) {
  const auto ex = impl->loop.executor();
  if (auto error = impl->validate(is_put, peer, region, segments, chunk, window, pipeline))
    return runtime::complete_later(ex, std::move(h), error);
  detail::OpRequest request;
  request.rank = peer;
  request.kind = is_put ? detail::OpKind::put : detail::OpKind::get;
  request.region = region;
  request.segments = segments;
  request.chunk = pipeline ? chunk : 0;
  request.window = window;
  impl->transport->submit(request, to_caller(ex, std::move(h), [is_put, peer] {
                            return std::string(is_put ? "put to rank " : "get from rank ") + std::to_string(peer);
                          }));
}

void Session::start_put_notify_on_loop(const std::shared_ptr<detail::SessionImpl>& impl, std::uint32_t peer,
                                       std::uint64_t region, Segment segment, CtrlMessage message, handler h) {
  const auto ex = impl->loop.executor();
  if (auto error = impl->validate(true, peer, region, segments_of(segment), 0, 0, false))
    return runtime::complete_later(ex, std::move(h), error);
  if (message.bytes().size() > impl->opts.ctrl.max_frame_length)
    return runtime::complete_later(
        ex, std::move(h),
        std::make_exception_ptr(InvalidArgumentError("put_notify: " + std::to_string(message.bytes().size()) +
                                                     " bytes exceed the maximum control message of " +
                                                     std::to_string(impl->opts.ctrl.max_frame_length))));
  if (impl->fast_send.count(peer) == 0) {
    // No fast path to the peer (yet): the put, then the message on the control channel, in order.
    detail::OpRequest put;
    put.rank = peer;
    put.region = region;
    put.segments = segments_of(segment);
    return impl->transport->submit(
        put, [impl, peer, m = std::move(message), h = std::move(h)](runtime::error_code ec) mutable {
          if (!ec) return start_ctrl_send(impl, peer, std::move(m), std::move(h));
          to_caller(impl->loop.executor(), std::move(h), [peer] { return "put_notify to rank " + std::to_string(peer); })(ec);
        });
  }
  const std::vector<std::byte> wire = detail::encode_fast_message(message);
  ++impl->fast_sent[peer];
  detail::OpRequest request;
  request.rank = peer;
  request.kind = detail::OpKind::put_notify;
  request.region = region;
  request.segments = segments_of(segment);
  request.message = wire;
  impl->transport->submit(request, to_caller(ex, std::move(h), [peer] {
                            return "put_notify to rank " + std::to_string(peer);
                          }));
}

RegisteredMemory Session::register_memory(void* data, std::size_t size, MemoryType type) {
  if (data == nullptr || size == 0) throw InvalidArgumentError("register_memory: null pointer or zero size");
  const std::uint64_t id = loop_->call([&] {
    if (impl_->closed || !impl_->transport) throw ClosedError("register_memory on a closed session");
    return impl_->transport->register_region(data, size, type);
  });
  return RegisteredMemory(this, alive_, id, data, size);
}

void Session::unregister_memory(std::uint64_t id) noexcept {
  try {
    loop_->call([&] {
      if (impl_->transport) impl_->transport->unregister_region(id);
    });
  } catch (const std::exception& e) {
    detail::log().warn("unregistering memory region {}: {}", id, e.what());
  }
}

RegisteredMemory::RegisteredMemory(Session* session, std::weak_ptr<int> session_alive, std::uint64_t id, void* data,
                                   std::size_t size) noexcept
    : session_(session), session_alive_(std::move(session_alive)), id_(id), data_(data), size_(size) {}

RegisteredMemory::RegisteredMemory(RegisteredMemory&& other) noexcept
    : session_(other.session_),
      session_alive_(std::move(other.session_alive_)),
      id_(other.id_),
      data_(other.data_),
      size_(other.size_) {
  other.id_ = 0;
}

RegisteredMemory& RegisteredMemory::operator=(RegisteredMemory&& other) noexcept {
  if (this != &other) {
    reset();
    session_ = other.session_;
    session_alive_ = std::move(other.session_alive_);
    id_ = other.id_;
    data_ = other.data_;
    size_ = other.size_;
    other.id_ = 0;
  }
  return *this;
}

RegisteredMemory::~RegisteredMemory() { reset(); }

void RegisteredMemory::reset() noexcept {
  if (id_ != 0 && session_alive_.lock()) session_->unregister_memory(id_);
  id_ = 0;
}

std::future<void> Session::put_nb(std::uint32_t peer, std::size_t local_off, std::size_t remote_off, std::size_t size) {
  return async_put(peer, local_off, remote_off, size, runtime::asio::use_future);
}

std::future<void> Session::get_nb(std::uint32_t peer, std::size_t local_off, std::size_t remote_off, std::size_t size) {
  return async_get(peer, local_off, remote_off, size, runtime::asio::use_future);
}

void Session::wait(std::future<void>& op, std::chrono::milliseconds timeout) {
  if (!op.valid()) throw InvalidArgumentError("wait: the future was already waited for");
  if (op.wait_for(timeout) != std::future_status::ready)
    throw TimeoutError("operation not complete after " + std::to_string(timeout.count()) + " ms");
  op.get();
}

void Session::wait(std::span<std::future<void>> ops, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::size_t pending = 0;
  for (auto& op : ops) {
    if (!op.valid()) throw InvalidArgumentError("wait: a future in the list was already waited for");
    if (op.wait_until(deadline) != std::future_status::ready) ++pending;
  }
  if (pending != 0)
    throw TimeoutError(std::to_string(pending) + " of " + std::to_string(ops.size()) +
                       " operations not complete after " + std::to_string(timeout.count()) + " ms");
  std::exception_ptr first;
  for (auto& op : ops) {
    try {
      op.get();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void Session::put(std::uint32_t peer, std::size_t local_off, std::size_t remote_off, std::size_t size) {
  forbid_loop_thread(*loop_, "put");
  wait_op(*loop_, wait_budget(options()), "put",
          [&](auto done) { async_put(peer, local_off, remote_off, size, std::move(done)); });
}

void Session::get(std::uint32_t peer, std::size_t local_off, std::size_t remote_off, std::size_t size) {
  forbid_loop_thread(*loop_, "get");
  wait_op(*loop_, wait_budget(options()), "get",
          [&](auto done) { async_get(peer, local_off, remote_off, size, std::move(done)); });
}

void Session::put_batch(std::uint32_t peer, std::vector<Segment> segments) {
  forbid_loop_thread(*loop_, "put_batch");
  wait_op(*loop_, wait_budget(options()), "put_batch",
          [&](auto done) { async_put_batch(peer, std::move(segments), std::move(done)); });
}

void Session::get_batch(std::uint32_t peer, std::vector<Segment> segments) {
  forbid_loop_thread(*loop_, "get_batch");
  wait_op(*loop_, wait_budget(options()), "get_batch",
          [&](auto done) { async_get_batch(peer, std::move(segments), std::move(done)); });
}

void Session::put_pipeline(std::uint32_t peer, std::size_t local_off, std::size_t remote_off, std::size_t size,
                           std::size_t chunk, std::size_t max_inflight) {
  forbid_loop_thread(*loop_, "put_pipeline");
  wait_op(*loop_, wait_budget(options()), "put_pipeline", [&](auto done) {
    async_put_pipeline(peer, local_off, remote_off, size, chunk, max_inflight, std::move(done));
  });
}

void Session::get_pipeline(std::uint32_t peer, std::size_t local_off, std::size_t remote_off, std::size_t size,
                           std::size_t chunk, std::size_t max_inflight) {
  forbid_loop_thread(*loop_, "get_pipeline");
  wait_op(*loop_, wait_budget(options()), "get_pipeline", [&](auto done) {
    async_get_pipeline(peer, local_off, remote_off, size, chunk, max_inflight, std::move(done));
  });
}

void Session::put_notify(std::uint32_t peer, std::size_t local_off, std::size_t remote_off, std::size_t size,
                         std::uint64_t tag) {
  forbid_loop_thread(*loop_, "put_notify");
  wait_op(*loop_, wait_budget(options()), "put_notify", [&](auto done) {
    async_put_notify(peer, local_off, remote_off, size, CtrlMessage::from_tag(tag), std::move(done));
  });
}

void Session::start_ctrl_send(const std::shared_ptr<detail::SessionImpl>& impl, std::uint32_t peer, CtrlMessage m,
                              handler h) {
  if (!impl->ctrl || impl->closed)
    return runtime::complete_later(
        impl->loop.executor(), std::move(h),
        impl->closed ? std::make_exception_ptr(ClosedError("ctrl_send on a closed session"))
                     : std::make_exception_ptr(NotConnectedError("ctrl_send: init_server() or connect() first")));
  if (impl->fast_send.count(peer) != 0 && impl->transport) {
    if (m.bytes().size() > impl->opts.ctrl.max_frame_length)
      return runtime::complete_later(
          impl->loop.executor(), std::move(h),
          std::make_exception_ptr(InvalidArgumentError("ctrl_send: " + std::to_string(m.bytes().size()) +
                                                       " bytes exceed the maximum control message of " +
                                                       std::to_string(impl->opts.ctrl.max_frame_length))));
    const std::vector<std::byte> wire = detail::encode_fast_message(m);
    ++impl->fast_sent[peer];
    detail::OpRequest request;
    request.rank = peer;
    request.kind = detail::OpKind::message;
    request.message = wire;
    return impl->transport->submit(request, to_caller(impl->loop.executor(), std::move(h), [peer] {
                                     return "ctrl_send to rank " + std::to_string(peer);
                                   }));
  }
  impl->ctrl->async_send(peer, std::move(m), std::move(h));
}

void Session::start_ctrl_recv(const std::shared_ptr<detail::SessionImpl>& impl, std::uint32_t peer,
                              std::chrono::milliseconds timeout,
                              runtime::asio::any_completion_handler<void(std::exception_ptr, CtrlMessage)> h) {
  if (!impl->ctrl || impl->closed)
    return runtime::complete_later(
        impl->loop.executor(), std::move(h),
        impl->closed ? std::make_exception_ptr(ClosedError("ctrl_recv on a closed session"))
                     : std::make_exception_ptr(NotConnectedError("ctrl_recv: init_server() or connect() first")),
        CtrlMessage{});
  impl->ctrl->async_recv(peer, timeout, std::move(h));
}

void Session::ctrl_send(std::uint32_t peer, std::uint64_t tag) {
  forbid_loop_thread(*loop_, "ctrl_send");
  wait_op(*loop_, wait_budget(options()), "ctrl_send",
          [&](auto done) { async_ctrl_send(peer, CtrlMessage::from_tag(tag), std::move(done)); });
}

std::uint64_t Session::ctrl_recv(std::uint32_t peer, std::chrono::milliseconds timeout) {
  forbid_loop_thread(*loop_, "ctrl_recv");
  // A callback, not use_future: a future would nudge the keeper although this thread drives.
  auto tag = std::make_shared<std::uint64_t>(0);
  wait_op(*loop_, timeout + std::chrono::seconds(1), "ctrl_recv", [&](auto done) {
    async_ctrl_recv(peer, timeout, [tag, done = std::move(done)](std::exception_ptr e, CtrlMessage m) mutable {
      try {
        if (!e) *tag = m.tag();
      } catch (...) {
        e = std::current_exception();
      }
      done(std::move(e));
    });
  });
  return *tag;
}

std::size_t Session::progress(const std::function<bool()>& stop) { return loop_->dedicated() ? 0 : loop_->poll(stop); }

std::size_t Session::progress(const std::function<bool()>& stop, bool& again) {
  again = false;
  return loop_->dedicated() ? 0 : loop_->poll(stop, again);
}

bool Session::progress_until(const std::function<bool()>& done, std::chrono::steady_clock::time_point deadline) {
  if (loop_->dedicated())
    throw InvalidArgumentError("progress_until: this session has its own progress thread (ProgressThread::own)");
  forbid_loop_thread(*loop_, "progress_until");
  return loop_->run_until(done, deadline);
}

int Session::wakeup_fd() {
  if (options().progress_thread != ProgressThread::caller)
    throw InvalidArgumentError("wakeup_fd: only a session without a progress thread has one (ProgressThread::caller)");
  return loop_->wakeup_fd();
}

void Session::disconnect(std::uint32_t peer) {
  loop_->call([&] { impl_->peer_down(peer, "disconnect() dropped it on this side"); });
}

void Session::start_close(const std::shared_ptr<detail::SessionImpl>& impl, handler h) {
  impl->start_close(std::move(h));
}

void Session::close() {
  // On the loop thread nobody could run the goodbye while this waits: close at once.
  if (loop_->in_loop_thread()) return impl_->close_on_loop();
  try {
    wait_op(*loop_, detail::SessionImpl::kGoodbyeBudget + std::chrono::seconds(1), "close",
            [&](auto done) { async_close(std::move(done)); });
  } catch (const TimeoutError&) {
    detail::log().warn("close: the goodbye did not finish; closing at once");
  }
  loop_->call([&] { impl_->close_on_loop(); });
}

}  // namespace hmc
