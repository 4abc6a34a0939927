// The goodbye: a graceful close, and a peer's (docs/session.md "Closing").
#include "session/session_impl.hpp"

#include <algorithm>

#include "hmc/error.hpp"
#include "peer_log.hpp"
#include "wire/byte_order.hpp"

namespace hmc::detail {

// Graceful close (docs/session.md "Closing"). The closer flushes what it sent to each peer, then
// says BYE with the number of fast-path messages it sent; an open peer flushes its side, waits
// for those messages, drops the data connection and answers BYE. Connections are torn down only
// once every peer answered (or was lost, or kGoodbyeBudget passed): nobody's flush meets a
// vanished peer, and no message is overtaken by the closing control socket.
void SessionImpl::start_close(Session::handler h) {
  if (close_done) return runtime::complete_later(loop.executor(), std::move(h), std::exception_ptr{});
  close_waiters.push_back(std::move(h));
  if (closing) return;
  closing = true;
  stop_admitting();
  if (transport) transport->expect_losses();
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
      if (auto self = weak.lock())
        self->send_bye(rank, [weak, rank] {
          if (auto s = weak.lock(); s && s->goodbye_unsent > 0) {
            --s->goodbye_unsent;
            s->bye_sent.insert(rank);
            s->after_goodbyes(rank);
            s->maybe_finish_close();
          }
        });
    });
  }
  maybe_finish_close();
}

// No new operation, peer or waiter from here; waiters for a peer fail now.
void SessionImpl::stop_admitting() {
  if (closed) return;
  closed = true;
  ready.close(make_error_code(Status::CLOSED));
  while (!address_waiters.empty())
    finish_waiter(address_waiters.begin()->first,
                  std::make_exception_ptr(ClosedError("the session closed while waiting for a peer")), 0);
}

// Posted: this may run inside a transport callback (a peer failed), which must not destroy it.
void SessionImpl::maybe_finish_close() {
  if (!closing || goodbye_timer == nullptr || !goodbye_waiting.empty() || goodbye_unsent != 0) return;
  runtime::asio::post(loop.executor(), [weak = weak_from_this()] {
    if (auto self = weak.lock(); self && !self->close_done) self->close_on_loop();
  });
}

// Immediate close: what is still in flight fails with ClosedError. Waiters hear of it once.
void SessionImpl::close_on_loop() {
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
void SessionImpl::flush_then(std::uint32_t rank, std::function<void()> then) {
  if (!transport || transport->peer(rank) == nullptr || !ready.is_ready(rank)) return then();
  OpRequest flush;
  flush.rank = rank;
  flush.kind = OpKind::flush;
  transport->submit(flush, [then = std::move(then)](runtime::error_code) { then(); });
}

void SessionImpl::send_bye(std::uint32_t rank, std::function<void()> sent) {
  std::array<std::byte, kBye.size() + 8> wire{};
  std::copy(kBye.begin(), kBye.end(), wire.begin());
  auto it = fast_sent.find(rank);
  detail::store_le64(wire.data() + kBye.size(), it == fast_sent.end() ? 0 : it->second);
  fast_send.erase(rank);  // nothing may follow the BYE on the fast path
  ctrl->async_send(rank, CtrlMessage::from_transport(wire), [sent = std::move(sent)](std::exception_ptr) { sent(); });
}

// A peer's BYE: its answer to ours, or its own close. One per connection; more are ignored.
void SessionImpl::bye(std::uint32_t rank, std::uint64_t fast_messages) {
  if (!bye_seen.insert(rank).second) return;
  log().debug("rank {} says goodbye after {} fast-path messages", rank, fast_messages);
  if (closing) {
    after_goodbyes(rank);
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
    log().warn("rank {} said goodbye but {} of its fast-path messages never came{}", rank,
               self->departing.at(rank).expected - self->fast_received[rank],
               peer_fields(rank, "ctrl_recv", Status::PEER_LOST));
    self->depart(rank);
  });
  flush_then(rank, [weak = weak_from_this(), rank] {
    auto self = weak.lock();
    if (!self || self->departing.count(rank) == 0) return;
    self->departing.at(rank).flushed = true;
    self->depart_when_ready(rank);
  });
}

// Both sides closing said BYE, each after flushing what it sent: nothing more moves between them,
// so the data connection goes now, quietly, rather than fail when the peer's process ends while
// this close still waits for slower peers.
void SessionImpl::after_goodbyes(std::uint32_t rank) {
  if (bye_seen.count(rank) == 0 || bye_sent.count(rank) == 0 || !transport || transport->peer(rank) == nullptr) return;
  transport->remove_peer(rank, make_error_code(Status::CLOSED));
}

void SessionImpl::depart_when_ready(std::uint32_t rank) {
  const Departure& d = departing.at(rank);
  if (d.flushed && fast_received[rank] >= d.expected) depart(rank);
}

// Everything the departing peer sent has arrived and ours to it is flushed: drop its data
// connection (its control connection ends when it closes) and answer, which lets it close.
void SessionImpl::depart(std::uint32_t rank) {
  note_loss(rank, "it closed its session (it said goodbye)");
  departing.erase(rank);
  ready.fail(rank, make_error_code(Status::PEER_LOST));
  if (transport) transport->remove_peer(rank, make_error_code(Status::PEER_LOST));
  if (ctrl) send_bye(rank, [] {});
}

}  // namespace hmc::detail
