// CtrlChannelImpl's construction, its peers' connections and the close of everything.
#include "ctrl/ctrl_channel_impl.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>

namespace hmc::detail {

std::string ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

bool peer_spoke_plain_text(const error_code& ec) {
  return ec.category() == asio::error::get_ssl_category() &&
         ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == SSL_R_WRONG_VERSION_NUMBER;
}

CtrlChannelImpl::CtrlChannelImpl(runtime::EventLoop& l, std::uint32_t rank, CtrlOptions o)
    : loop(l), ex(l.executor()), self_rank(rank), opts(std::move(o)), connected(ex) {
  if (opts.authenticate) {
    AuthKeyOrigin origin;
    key = resolve_auth_key(opts.auth_key, &origin);
    key_origin = origin.description;
    log().debug("ctrl: peers authenticate with the key from {}", origin.description);
  } else {
    log().warn("ctrl: peer authentication is OFF (authenticate = false): any process that reaches the control "
               "port can read and write this session's memory");
  }
  tls = make_tls_context(opts);
}

ConnectionLimits CtrlChannelImpl::limits() const {
  return ConnectionLimits{opts.max_frame_length, opts.send_timeout, opts.heartbeat_interval, opts.heartbeat_misses,
                          opts.partial_frame_timeout};
}

bool CtrlChannelImpl::alive(std::uint32_t rank) const {
  auto it = peers.find(rank);
  return it != peers.end() && it->second->conn && it->second->conn->is_open();
}

void CtrlChannelImpl::add_peer(std::uint32_t rank, const std::shared_ptr<CtrlConnection>& conn, std::uint8_t plane) {
  auto& slot = peers[rank];
  // A rank that reconnects after a loss starts with a fresh inbox; a waiting receive's placeholder is kept.
  if (!slot || slot->ever_connected) slot = new_peer();
  slot->conn = conn;
  slot->plane = plane;
  slot->ever_connected = true;
  std::weak_ptr<Peer> weak_peer = slot;
  std::weak_ptr<CtrlChannelImpl> weak_self = weak_from_this();
  conn->start(
      [weak_peer, weak_self, rank](CtrlMessage m) {
        auto p = weak_peer.lock();
        auto self = weak_self.lock();
        if (!p || !self) return;
        ++self->counters.messages_received;
        self->counters.bytes_received += m.bytes().size();
        if (m.kind() != CtrlKind::transport) {
          self->push_message(p, std::move(m));
        } else if (self->handlers.on_transport) {
          self->handlers.on_transport(rank, std::move(m));
        }
      },
      [weak_peer, weak_self, conn_raw = conn.get(), rank](error_code, const std::string& why) {
        auto p = weak_peer.lock();
        if (!p || p->conn.get() != conn_raw) return;
        log().info("ctrl peer rank {} lost: {}", rank, why);
        p->lost_why = why;
        p->conn.reset();
        p->inbox.close(make_error_code(Status::PEER_LOST));
        p->notify_waits.close(make_error_code(Status::PEER_LOST));
        auto self = weak_self.lock();
        if (!self) return;
        self->connected.reset(rank);
        self->forget_old_losses(rank);
        if (self->handlers.on_peer) self->handlers.on_peer(rank, false);
      });
  log().info("ctrl peer rank {} connected over {} ({})", rank, transport_name(*conn), conn->remote());
  if (handlers.on_peer) handlers.on_peer(rank, true);
  connected.set(rank);
}

// A lost peer's entry answers later receives with PeerLostError. Ranks handed to "any" clients
// are never reused, so only the newest max_connections losses are remembered (drained ones).
void CtrlChannelImpl::forget_old_losses(std::uint32_t just_lost) {
  losses.push_back(just_lost);
  while (losses.size() > opts.max_connections) {
    auto it = peers.find(losses.front());
    losses.pop_front();
    if (it != peers.end() && !it->second->conn && it->second->inbox.size() == 0 && it->second->inbox.waiters() == 0 &&
        it->second->notify_waits.size() == 0)
      peers.erase(it);
  }
}

std::string CtrlChannelImpl::transport_name(const CtrlConnection& c) { return c.is_tls() ? "tls" : c.transport(); }

std::uint32_t CtrlChannelImpl::own_heartbeat_ms() const {
  return static_cast<std::uint32_t>(std::clamp<std::int64_t>(opts.heartbeat_interval.count(), 0, 0xFFFFFFFF));
}

void CtrlChannelImpl::close_all() {
  if (closed) return;
  closed = true;
  stop_listening();
  std::vector<std::shared_ptr<CtrlConnection>> pending;
  handshaking.for_each([&](const auto& c) { pending.push_back(c); });
  handshaking.clear();
  for (const auto& c : pending) c->close(make_error_code(Status::CLOSED), "channel closed");
  handshake_log->flush();
  for (auto& [rank, p] : std::map<std::uint32_t, Pending>(reserved))
    p.conn->close(make_error_code(Status::CLOSED), "channel closed");
  reserved.clear();
  for (auto& [rank, peer] : peers) {
    if (peer->conn) peer->conn->close(make_error_code(Status::CLOSED), "channel closed");
    if (!peer->ever_connected) {
      peer->inbox.close(make_error_code(Status::CLOSED));
      peer->notify_waits.close(make_error_code(Status::CLOSED));
    }
  }
  connected.close(make_error_code(Status::CLOSED));
}

}  // namespace hmc::detail
