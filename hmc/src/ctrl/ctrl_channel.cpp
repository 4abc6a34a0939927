#include "hmc/ctrl_channel.hpp"

#include <string>

#include "ctrl/ctrl_channel_impl.hpp"

namespace hmc {

CtrlChannel::CtrlChannel(runtime::EventLoop& loop, std::uint32_t self_rank, CtrlOptions options)
    : loop_(loop), impl_(std::make_shared<detail::CtrlChannelImpl>(loop, self_rank, std::move(options))) {}

CtrlChannel::~CtrlChannel() { close(); }

std::uint32_t CtrlChannel::rank() const noexcept { return impl_->self_rank.load(); }

void CtrlChannel::set_handlers(CtrlHandlers handlers) {
  loop_.call([&] { impl_->handlers = std::move(handlers); });
}

runtime::loop_executor CtrlChannel::executor() const noexcept { return impl_->ex; }

void CtrlChannel::stop_listening() {
  loop_.call([&] { impl_->stop_listening(); });
}

bool CtrlChannel::deliver(std::uint32_t rank, CtrlMessage message) {
  return loop_.call([&] {
    if (!impl_->alive(rank)) return true;
    const auto& p = impl_->peers.at(rank);
    const std::size_t cost = detail::inbox_cost(message);
    if (p->inbox_bytes + cost > 2 * impl_->opts.inbox_budget ||
        *impl_->inbox_total + cost > 2 * impl_->opts.total_inbox_budget)
      return false;
    impl_->push_message(p, std::move(message));
    return true;
  });
}

std::string CtrlChannel::uds_path() const {
  return loop_.call([&] { return impl_->uds_acceptor && impl_->uds_acceptor->is_open() ? impl_->uds_path : ""; });
}

std::vector<std::uint32_t> CtrlChannel::peers() const {
  return loop_.call([&] {
    std::vector<std::uint32_t> out;
    for (const auto& [rank, peer] : impl_->peers)
      if (impl_->alive(rank)) out.push_back(rank);
    return out;
  });
}

CtrlStats CtrlChannel::stats() const {
  return loop_.call([&] { return impl_->counters; });
}

std::string CtrlChannel::lost_reason(std::uint32_t rank) const {
  return loop_.call([&]() -> std::string {
    auto it = impl_->peers.find(rank);
    return it == impl_->peers.end() || impl_->alive(rank) ? "" : it->second->lost_why;
  });
}

std::string CtrlChannel::transport_of(std::uint32_t rank) const {
  return loop_.call([&] {
    if (!impl_->alive(rank)) throw NotConnectedError("no control connection to rank " + std::to_string(rank));
    return detail::CtrlChannelImpl::transport_name(*impl_->peers.at(rank)->conn);
  });
}

std::string CtrlChannel::remote_host(std::uint32_t rank) const {
  return loop_.call([&]() -> std::string {
    if (!impl_->alive(rank)) return {};
    const detail::CtrlConnection& conn = *impl_->peers.at(rank)->conn;
    if (conn.transport() != "tcp") return {};
    std::string host = detail::source_of(conn.remote());
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    return host;
  });
}

std::uint8_t CtrlChannel::plane_of(std::uint32_t rank) const {
  return loop_.call([&]() -> std::uint8_t { return impl_->alive(rank) ? impl_->peers.at(rank)->plane : 0; });
}

void CtrlChannel::disconnect(std::uint32_t rank) {
  loop_.call([&] {
    auto it = impl_->peers.find(rank);
    if (it != impl_->peers.end() && it->second->conn)
      it->second->conn->close(make_error_code(Status::CLOSED), "disconnected locally");
  });
}

void CtrlChannel::close() {
  loop_.call([&] { impl_->close_all(); });
}

void CtrlChannel::start_connect(const std::shared_ptr<detail::CtrlChannelImpl>& impl, std::string host,
                                std::uint16_t port, std::chrono::milliseconds timeout, std::uint8_t plane,
                                connect_handler h) {
  if (impl->closed) {
    impl->complete(std::move(h), make_error_code(Status::CLOSED), "ctrl connect on a closed channel", 0u);
    return;
  }
  if (plane > detail::kMaxPlane) {
    impl->complete(std::move(h), make_error_code(Status::INVALID_ARGUMENT),
                   "ctrl connect: data transport " + std::to_string(plane) + " is not in [0, 15]", 0u);
    return;
  }
  runtime::asio::co_spawn(impl->ex, impl->connect(std::move(host), port, timeout, plane, std::move(h)),
                          runtime::asio::detached);
}

void CtrlChannel::start_wait_peer(const std::shared_ptr<detail::CtrlChannelImpl>& impl, std::uint32_t rank,
                                  std::chrono::milliseconds timeout, asio_handler h) {
  const std::string what = "waiting for ctrl peer rank " + std::to_string(rank);
  if (impl->closed) return impl->complete(std::move(h), make_error_code(Status::CLOSED), what);
  auto slot = runtime::asio::get_associated_cancellation_slot(h);
  impl->connected.async_wait(
      rank, timeout,
      runtime::asio::bind_cancellation_slot(slot, [impl, what, h = std::move(h)](runtime::error_code ec) mutable {
        impl->complete(std::move(h), ec, what);
      }));
}

void CtrlChannel::start_send(const std::shared_ptr<detail::CtrlChannelImpl>& impl, std::uint32_t rank, CtrlMessage m,
                             asio_handler h) {
  const std::string what = "ctrl_send to rank " + std::to_string(rank);
  if (impl->closed) return impl->complete(std::move(h), make_error_code(Status::CLOSED), what);
  if (m.bytes().size() > impl->opts.max_frame_length)
    return impl->complete(std::move(h), make_error_code(Status::INVALID_ARGUMENT),
                          what + ": " + std::to_string(m.bytes().size()) + " bytes exceed the maximum frame of " +
                              std::to_string(impl->opts.max_frame_length));
  auto it = impl->peers.find(rank);
  if (it == impl->peers.end() || !it->second->ever_connected)
    return impl->complete(std::move(h), make_error_code(Status::NOT_CONNECTED), what);
  if (!impl->alive(rank))
    return impl->complete(std::move(h), make_error_code(Status::PEER_LOST),
                          what + " (its connection ended: " + it->second->lost_why + ")");
  const auto type = static_cast<detail::FrameType>(m.kind());  // CtrlKind values are the frame types
  it->second->conn->send(detail::encode_frame(type, m.bytes().data(), m.bytes().size()),
                         [impl, what, n = m.bytes().size(), h = std::move(h)](runtime::error_code ec) mutable {
                           if (!ec) {
                             ++impl->counters.messages_sent;
                             impl->counters.bytes_sent += n;
                           }
                           impl->complete(std::move(h), ec, what);
                         });
}

void CtrlChannel::start_recv(const std::shared_ptr<detail::CtrlChannelImpl>& impl, std::uint32_t rank,
                             std::chrono::milliseconds timeout, recv_handler h) {
  const std::string what = "ctrl_recv from rank " + std::to_string(rank);
  if (impl->closed) return impl->complete(std::move(h), make_error_code(Status::CLOSED), what, CtrlMessage{});
  auto& slot_ref = impl->peers[rank];
  if (!slot_ref) slot_ref = impl->new_peer();  // wait for rank to connect
  std::weak_ptr<detail::CtrlChannelImpl::Peer> weak_peer = slot_ref;
  auto slot = runtime::asio::get_associated_cancellation_slot(h);
  slot_ref->inbox.async_pop(
      timeout, runtime::asio::bind_cancellation_slot(slot, [impl, weak_peer, rank, what, h = std::move(h)](
                                                               runtime::error_code ec, CtrlMessage msg) mutable {
        std::string context = what;
        if (auto p = weak_peer.lock()) {
          if (!ec) {
            impl->drained(*p, detail::inbox_cost(msg));
          } else if (ec == make_error_code(Status::PEER_LOST) && !p->lost_why.empty()) {
            context += " (its connection ended: " + p->lost_why + ")";
          } else if (!p->ever_connected) {
            if (ec == runtime::asio::error::timed_out)
              context += " (rank " + std::to_string(rank) + " never connected)";
            auto it = impl->peers.find(rank);
            if (p->inbox.waiters() == 0 && it != impl->peers.end() && it->second == p) impl->peers.erase(it);
          }
        }
        impl->complete(std::move(h), ec, context, std::move(msg));
      }));
}

void CtrlChannel::start_wait_tag(const std::shared_ptr<detail::CtrlChannelImpl>& impl, std::uint32_t rank,
                                 std::uint64_t tag, std::uint64_t count, std::chrono::milliseconds timeout,
                                 asio_handler h) {
  const std::string what = "wait_notify for tag " + std::to_string(tag) + " from rank " + std::to_string(rank);
  if (impl->closed) return impl->complete(std::move(h), make_error_code(Status::CLOSED), what);
  if (count == 0) return impl->complete(std::move(h), make_error_code(Status::INVALID_ARGUMENT), what + ": count 0");
  auto& slot_ref = impl->peers[rank];
  if (!slot_ref) slot_ref = impl->new_peer();  // wait for rank to connect
  detail::CtrlChannelImpl::Peer& p = *slot_ref;
  std::vector<CtrlMessage> taken =
      p.inbox.take_if([tag](const CtrlMessage& m) { return m.kind() == CtrlKind::tag && m.tag() == tag; },
                      p.notify_waits.wanted(tag, count));
  for (const CtrlMessage& m : taken) impl->drained(p, detail::inbox_cost(m));
  std::weak_ptr<detail::CtrlChannelImpl::Peer> weak_peer = slot_ref;
  p.notify_waits.wait(tag, count, taken.size(), timeout,
                      [impl, weak_peer, rank, what, h = std::move(h)](runtime::error_code ec) mutable {
                        std::string context = what;
                        if (auto peer = weak_peer.lock()) {
                          if (ec == make_error_code(Status::PEER_LOST) && !peer->lost_why.empty()) {
                            context += " (its connection ended: " + peer->lost_why + ")";
                          } else if (ec == make_error_code(Status::INVALID_ARGUMENT)) {
                            context += ": " + std::to_string(detail::NotifyWaits::kMaxWaits) +
                                       " waits already pending on this peer";
                          } else if (!peer->ever_connected && ec == runtime::asio::error::timed_out) {
                            context += " (rank " + std::to_string(rank) + " never connected)";
                            auto it = impl->peers.find(rank);
                            if (peer->inbox.waiters() == 0 && peer->notify_waits.size() == 0 &&
                                it != impl->peers.end() && it->second == peer)
                              impl->peers.erase(it);
                          }
                        }
                        impl->complete(std::move(h), ec, context);
                      });
}

}  // namespace hmc
