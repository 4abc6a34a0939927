// Session's blocking calls and how they wait: on a future or a OneShot, driving a caller-driven
// loop meanwhile; progress() and wakeup_fd() for callers that drive the loop themselves.
#include <algorithm>
#include <future>

#include "hmc/error.hpp"
#include "hmc/runtime/deadline.hpp"
#include "hmc/session.hpp"
#include "session/connect_notice.hpp"
#include "session/session_impl.hpp"

namespace hmc {

namespace {

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

// A client's set-up before it dials, on the loop: the transport it asks for, its control channel as
// self_id, the address it is known by.
void prepare_connect(detail::SessionImpl& impl, ConnType conn, std::uint32_t self_id) {
  if (impl.closed) throw ClosedError("connect on a closed session");
  impl.use_conn(conn);
  impl.ensure_ctrl(self_id, {});
  if (impl.advertised_ip.empty()) impl.advertised_ip = impl.opts.local_ip;
}

}  // namespace

std::uint32_t Session::connect(std::uint32_t peer_id, std::uint32_t self_id, const std::string& peer_ip,
                               std::uint16_t data_port, std::uint16_t ctrl_tcp_port, ConnType conn,
                               std::optional<std::chrono::milliseconds> timeout) {
  forbid_loop_thread(*loop_, "connect");
  loop_->call([&] { prepare_connect(*impl_, conn, self_id); });
  return dial(peer_ip, ctrl_tcp_port, conn, peer_id, data_port, timeout);
}

std::uint32_t Session::connect(const std::string& ip, std::uint16_t ctrl_port, ConnType conn,
                               std::optional<std::chrono::milliseconds> timeout) {
  forbid_loop_thread(*loop_, "connect");
  loop_->call([&] { prepare_connect(*impl_, conn, CtrlChannel::any_rank); });
  return dial(ip, ctrl_port, conn, std::nullopt, std::nullopt, timeout);  // known by the dialled ip; any data port
}

// Both connect() forms once the control channel exists: the control connection, then the data
// connection, within one timeout.
std::uint32_t Session::dial(const std::string& ip, std::uint16_t ctrl_port, ConnType conn,
                            std::optional<std::uint32_t> peer_id, std::optional<std::uint16_t> data_port,
                            std::optional<std::chrono::milliseconds> timeout) {
  const std::chrono::milliseconds budget = timeout.value_or(options().timeout);
  if (budget.count() <= 0)
    throw InvalidArgumentError("connect: timeout must be > 0 ms, not " + std::to_string(budget.count()));
  const auto deadline = runtime::deadline_after(budget);
  const std::string where = ip + ":" + std::to_string(ctrl_port);
  detail::ConnectNotice notice(
      *loop_, (peer_id ? "rank " + std::to_string(*peer_id) : std::string("the server")) + " at " + where, budget);
  const std::uint32_t rank = wait_for(
      *loop_,
      impl_->ctrl->async_connect(ip, ctrl_port, budget, detail::SessionImpl::plane_of(conn), runtime::asio::use_future),
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
          runtime::complete_later(
              impl->loop.executor(), std::move(h),
              ec ? make_error(ec, "waiting for a data connection to rank " + std::to_string(rank)) : nullptr);
        });
      });
  wait_for(*loop_, std::move(f), timeout + std::chrono::seconds(1), "wait_peer");
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

void Session::put_batch_notify(std::uint32_t peer, std::vector<Segment> segments, std::uint64_t tag) {
  forbid_loop_thread(*loop_, "put_batch_notify");
  wait_op(*loop_, wait_budget(options()), "put_batch_notify", [&](auto done) {
    async_put_batch_notify(peer, std::move(segments), CtrlMessage::from_tag(tag), std::move(done));
  });
}

// The blocks' segments are made on the caller's thread: a bad id throws before anything waits.
void Session::put_blocks(std::uint32_t peer, const KvLayout& local, std::span<const std::uint64_t> src_ids,
                         const KvLayout& remote, std::span<const std::uint64_t> dst_ids) {
  put_batch(peer, local.segments_to(remote, src_ids, dst_ids, "src_ids", "dst_ids"));
}

void Session::get_blocks(std::uint32_t peer, const KvLayout& local, std::span<const std::uint64_t> src_ids,
                         const KvLayout& remote, std::span<const std::uint64_t> dst_ids) {
  get_batch(peer, local.segments_to(remote, dst_ids, src_ids, "dst_ids", "src_ids"));
}

void Session::put_blocks_notify(std::uint32_t peer, const KvLayout& local, std::span<const std::uint64_t> src_ids,
                                const KvLayout& remote, std::span<const std::uint64_t> dst_ids, std::uint64_t tag) {
  put_batch_notify(peer, local.segments_to(remote, src_ids, dst_ids, "src_ids", "dst_ids"), tag);
}

void Session::ctrl_send(std::uint32_t peer, std::uint64_t tag) {
  forbid_loop_thread(*loop_, "ctrl_send");
  wait_op(*loop_, wait_budget(options()), "ctrl_send",
          [&](auto done) { async_ctrl_send(peer, CtrlMessage::from_tag(tag), std::move(done)); });
}

void Session::wait_notify(std::uint32_t peer, std::uint64_t tag, std::uint64_t count,
                          std::chrono::milliseconds timeout) {
  forbid_loop_thread(*loop_, "wait_notify");
  wait_op(*loop_, timeout + std::chrono::seconds(1), "wait_notify",
          [&](auto done) { async_wait_notify(peer, tag, count, timeout, std::move(done)); });
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
