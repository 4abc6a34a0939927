// Peers as they come and go, the names they are known by, the losses noted, and callers waiting for one.
#include "session/session_impl.hpp"

#include <algorithm>

#include "hmc/error.hpp"
#include "peer_log.hpp"
#include "wire/byte_order.hpp"

namespace hmc::detail {

// A peer's transport is the one its client named in the handshake, built before the connection
// came up (connect() on this side, admit_plane on a server). False when it is not to be had.
bool SessionImpl::route(std::uint32_t rank) {
  if (transport->plane_of(rank)) return true;
  const std::uint8_t plane = ctrl->plane_of(rank);
  if (!transport->built(plane)) {
    log().error("rank {} connected for data transport {}, which this session has not set up; dropping it{}", rank,
                plane, peer_fields(rank, "connect", Status::UNSUPPORT));
    ctrl->disconnect(rank);
    return false;
  }
  transport->assign(rank, plane);
  set_peer_conn(rank, conn_of(plane));
  return true;
}

// A control connection came up: send the peer what it needs to reach our buffer.
void SessionImpl::peer_up(std::uint32_t rank) {
  if (closed || !transport || !route(rank)) return;
  const std::uint8_t plane = *transport->plane_of(rank);
  linked[rank] = Loss{};
  lost.erase(rank);
  const auto info =
      transport->local_info(rank, LocalAddress{ctrl->rank(), advertised_ip, data_port.at(plane), bind_ip});
  ctrl->async_send(rank, CtrlMessage::from_transport(info), [rank](std::exception_ptr e) {
    if (e)
      log().warn("could not send the data-plane peer info to rank {}{}", rank,
                 peer_fields(rank, "connect", Status::PEER_LOST));
  });
}

// The peer's data-plane info arrived (before any later control message of theirs): connect to it.
// A second one for a live peer is a protocol violation: it would tear down a working connection
// (and its operations) on the peer's say-so, so the offender is disconnected instead.
void SessionImpl::peer_info(std::uint32_t rank, const CtrlMessage& m) {
  if (m.bytes().size() == kBye.size() + 8 && std::equal(kBye.begin(), kBye.end(), m.bytes().begin()))
    return bye(rank, detail::load_le64(m.bytes().data() + kBye.size()));
  if (closed || !transport) return;
  if (m.bytes().size() == kSwitch.size() && std::equal(kSwitch.begin(), kSwitch.end(), m.bytes().begin()))
    return fast_switch(rank);
  if (!route(rank)) return;  // its info may overtake our peer_up
  if (transport->peer(rank) == nullptr) transport->set_peer_host(rank, ctrl->remote_host(rank));
  std::string why = transport->peer(rank) != nullptr ? "a second peer info for a live connection"
                                                     : transport->add_peer(rank, m.bytes());
  if (!why.empty()) {
    log().error("data connection to rank {} failed: {}; dropping the peer{}", rank, why,
                peer_fields(rank, "connect", Status::PEER_LOST));
    return peer_down(rank, "its data connection failed: " + why);
  }
}

// The transport's connection to `rank` is established (after peer_info): operations and the
// fast path may use it now. Nothing runs on a half-made UCX connection (docs/session.md).
void SessionImpl::peer_ready(std::uint32_t rank) {
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
void SessionImpl::peer_down(std::uint32_t rank, const std::string& how) {
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
  set_peer_conn(rank, std::nullopt);
  if (transport) transport->remove_peer(rank, make_error_code(Status::PEER_LOST));
  if (ctrl) ctrl->disconnect(rank);
}

// After a connect() to `ip`: the peer must serve the data port the caller named (the reference
// API names peers by (ip, data_port); another port would make later lookups miss or, worse, hit
// another peer), and it is known by that ip from now on.
void SessionImpl::connected(std::uint32_t rank, const std::string& ip, std::optional<std::uint16_t> port) {
  const PeerRecord* p = transport ? transport->peer(rank) : nullptr;
  if (p == nullptr) throw PeerLostError("connect to " + ip + ": rank " + std::to_string(rank) + " went away");
  if (port && p->data_port != *port) {
    const std::uint16_t served = p->data_port;
    peer_down(rank, "connect() found it serves data port " + std::to_string(served) + ", not " + std::to_string(*port));
    throw InvalidArgumentError("the session at " + ip + " (rank " + std::to_string(rank) + ") serves data port " +
                               std::to_string(served) + ", not " + std::to_string(*port));
  }
  dialed[rank] = ip;
  wake_address_waiters();
}

// Connected ranks known as `ip` (advertised, or the address connect() dialled) and, when given,
// `port` (advertised data port). Entries go with their peer.
std::vector<std::uint32_t> SessionImpl::ranks_named(const std::string& ip, std::optional<std::uint16_t> port) const {
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
std::exception_ptr SessionImpl::resolve(const std::string& ip, std::optional<std::uint16_t> port,
                                        std::uint32_t& rank) const {
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
    list += (list.empty() ? "" : ", ") +
            ("rank " + std::to_string(r) + " (" + p->ip + ":" + std::to_string(p->data_port) + ")");
  }
  return std::make_exception_ptr(InvalidArgumentError(std::to_string(ranks.size()) + " peers match " + name + ": " +
                                                      list + "; name one by rank" + (port ? "" : " or by ip:port")));
}

void SessionImpl::wait_address(const std::string& ip, std::optional<std::uint16_t> port,
                               std::chrono::milliseconds timeout, AddressHandler h) {
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
    self->finish_waiter(id,
                        std::make_exception_ptr(TimeoutError("no peer at " + name + " connected within " +
                                                             std::to_string(timeout.count()) + " ms")),
                        0);
  });
}

// A peer became usable or got a name: the waiters it satisfies (or makes ambiguous) complete.
void SessionImpl::wake_address_waiters() {
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

void SessionImpl::finish_waiter(std::uint64_t id, std::exception_ptr e, std::uint32_t rank) {
  auto it = address_waiters.find(id);
  if (it == address_waiters.end()) return;
  AddressWaiter w = std::move(it->second);
  address_waiters.erase(it);
  w.timer->cancel();
  runtime::asio::post(loop.executor(), runtime::asio::append(std::move(w.handler), e, rank));
}

void SessionImpl::set_peer_conn(std::uint32_t rank, std::optional<ConnType> type) {
  std::lock_guard lock(peer_conns_mutex);
  auto it = peer_conns.find(rank);
  if (it != peer_conns.end() && it->second != ConnType::UCX) --rdma_peers;
  if (it != peer_conns.end()) peer_conns.erase(it);
  if (!type) return;
  peer_conns[rank] = *type;
  if (*type != ConnType::UCX) ++rdma_peers;
}

std::optional<ConnType> SessionImpl::peer_conn(std::uint32_t rank) const {
  std::lock_guard lock(peer_conns_mutex);
  auto it = peer_conns.find(rank);
  if (it == peer_conns.end()) return std::nullopt;
  return it->second;
}

void SessionImpl::note_loss(std::uint32_t rank, const std::string& how) {
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

std::string SessionImpl::lost_text(std::uint32_t rank, const Loss& l) {
  return "rank " + std::to_string(rank) + " was lost: " + l.how +
         " (connect() to it again, or wait_peer() for a client that comes back)";
}

}  // namespace hmc::detail
