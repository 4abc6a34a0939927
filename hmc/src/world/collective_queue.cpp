// The collective queue: one collective at a time, in call order, and the fault that fails the rest.
#include "world/world_impl.hpp"

#include "hmc/error.hpp"
#include "hmc/runtime/deadline.hpp"
#include "hmc/runtime/log.hpp"
#include "world/batch.hpp"

namespace hmc::detail {

using Kind = CollectiveCall::Kind;
using std::chrono::milliseconds;

void WorldImpl::submit(CollectiveCall call,
                       asio::any_completion_handler<void(std::exception_ptr, CollectiveResult)> done) {
  if (shut_) {
    runtime::complete_later(ex, std::move(done), std::make_exception_ptr(ClosedError("the world is closed")),
                            CollectiveResult{});
    return;
  }
  queue_.push_back(Job{std::move(call), std::move(done)});
  if (!running_) {
    running_ = true;
    asio::co_spawn(ex, run_queue(), asio::detached);
  }
}

void WorldImpl::shutdown() {
  shut_ = true;
  if (!poisoned_) poisoned_ = std::make_exception_ptr(ClosedError("the world is closed"));
  // Collectives not started yet fail now; the running one fails as the Session closes under it.
  while (!queue_.empty()) {
    auto done = std::move(queue_.back().done);
    queue_.pop_back();
    runtime::complete_later(ex, std::move(done), poisoned_, CollectiveResult{});
  }
}

asio::awaitable<void> WorldImpl::run_queue() {
  auto self = shared_from_this();
  while (!queue_.empty()) {
    Job job = std::move(queue_.front());
    queue_.pop_front();
    CollectiveResult result;
    std::exception_ptr e = poisoned_;
    if (!e) {
      try {
        co_await run(job.call, result);
      } catch (...) {
        e = std::current_exception();
      }
    }
    runtime::complete_later(ex, std::move(job.done), e, std::move(result));
  }
  running_ = false;
}

asio::awaitable<void> WorldImpl::poison(const Fault& f, const char* collective, std::uint64_t seq) {
  const std::string text = rank_name(rank) + ", " + collective + " (round " + std::to_string(seq) + "): " + f.what;
  // Never null: a fault always fails the collective (a success status here would be our bug).
  poisoned_ = make_error(make_error_code(f.status == Status::SUCCESS ? Status::ERROR : f.status), text);
  runtime::log().warn("world: {}", text);
  // Every peer this rank talks to learns it too, and passes it on: nobody waits for its timeout.
  // The error returns once the aborts are on their way (the caller may exit right after).
  WorldMessage m;
  m.kind = WorldKind::abort;
  m.reason = static_cast<std::uint8_t>(f.status);
  m.seq = seq;
  m.a = f.culprit;
  auto b = batch();
  for (std::uint32_t p : connected)
    if (p != f.culprit || f.status != Status::PEER_LOST) send(b, p, m);
  if (store != nullptr) {
    // Ranks not connected to this one (waiting to be dialed, say) learn it from the store.
    const std::string what = f.status == Status::PEER_LOST
                                 ? rank_name(f.culprit) + " was lost"
                                 : std::string(hmc::to_string(f.status)) + " at " + rank_name(f.culprit);
    b->add();
    store->async_compare_set("world/abort", "",
                             std::to_string(static_cast<unsigned>(f.status)) + " " + std::to_string(f.culprit) + " " +
                                 what + " (reported by " + rank_name(rank) + ")",
                             [b](std::exception_ptr, std::string) { b->done(std::nullopt); });
  }
  co_await b->drain(runtime::deadline_after(std::chrono::seconds(1)));
}

asio::awaitable<void> WorldImpl::run(CollectiveCall& c, CollectiveResult& r) {
  const milliseconds timeout = c.timeout.count() > 0 ? c.timeout : options.timeout;
  const time_point deadline = runtime::deadline_after(timeout);
  const std::uint64_t first = seq_;
  std::optional<Fault> fault;
  try {
    if (aborted_) throw *aborted_;
    if ((c.kind == Kind::broadcast || c.kind == Kind::gather || c.kind == Kind::scatter) && c.root >= size)
      throw Fault{Status::INVALID_ARGUMENT, rank,
                  "root " + std::to_string(c.root) + " is not a rank of a world of " + std::to_string(size)};
    switch (c.kind) {
      case Kind::barrier: co_await barrier(deadline); break;
      case Kind::broadcast: co_await broadcast(c, r, deadline); break;
      case Kind::all_gather:
      case Kind::all_gather_v:
      case Kind::all_to_all:
      case Kind::all_to_all_v: co_await exchange(c, r, deadline); break;
      case Kind::gather: co_await gather(c, r, deadline); break;
      case Kind::scatter: co_await scatter(c, r, deadline); break;
      case Kind::all_reduce: co_await all_reduce(c, deadline); break;
    }
  } catch (const Fault& f) {
    fault = f;
  } catch (const Error& e) {
    fault = Fault{e.status(), rank, e.what()};
  } catch (const std::bad_alloc&) {
    fault = Fault{Status::ERROR, rank, "out of memory for the result"};
  }
  if (fault) {
    if (aborted_ && fault->status != aborted_->status) fault = aborted_;  // the cause, not a consequence
    co_await poison(*fault, to_string(c.kind), first);
    std::rethrow_exception(poisoned_);
  }
}

}  // namespace hmc::detail
