#pragma once
// Keys that become ready (a peer connected, an endpoint usable); async_wait(key) completes once the
// key is ready, at once if it already is, with a timeout and per-op cancellation. Loop thread only.
#include <map>
#include <memory>
#include <set>

#include "hmc/runtime/async_queue.hpp"

namespace hmc::runtime {

template <class Key>
class AsyncReadySet {
 public:
  explicit AsyncReadySet(loop_executor loop) : loop_(loop) {}

  void set(const Key& key) {
    ready_.insert(key);
    auto it = waiting_.find(key);
    if (it == waiting_.end()) return;
    // push hands one token to the oldest waiter: one per current waiter wakes them all.
    while (it->second->waiters() > 0) it->second->push(Ready{});
  }
  void reset(const Key& key) { ready_.erase(key); }

  // The key will not become ready for its current waiters: they fail with `why` now.
  void fail(const Key& key, error_code why) {
    ready_.erase(key);
    auto it = waiting_.find(key);
    if (it == waiting_.end()) return;
    it->second->close(why);
    waiting_.erase(it);  // close completed every waiter; later waits start a fresh queue
  }
  bool is_ready(const Key& key) const { return ready_.count(key) != 0; }

  // Every pending and later wait fails with `why`.
  void close(error_code why) {
    closed_ = why;
    for (auto& [key, q] : waiting_) q->close(why);
  }

  // handler(error_code): success once ready; timed_out, operation_aborted or the close reason.
  template <class Handler>
  void async_wait(const Key& key, std::chrono::nanoseconds timeout, Handler&& handler) {
    if (closed_) return asio::post(loop_, asio::append(std::forward<Handler>(handler), *closed_));
    if (is_ready(key)) return asio::post(loop_, asio::append(std::forward<Handler>(handler), error_code{}));
    auto& q = waiting_[key];
    if (!q) q = std::make_unique<AsyncQueue<Ready>>(loop_);
    auto slot = asio::get_associated_cancellation_slot(handler);
    q->async_pop(timeout, asio::bind_cancellation_slot(
                              slot, [h = std::forward<Handler>(handler)](error_code ec, Ready) mutable { h(ec); }));
  }

 private:
  struct Ready {};
  loop_executor loop_;
  std::set<Key> ready_;
  std::map<Key, std::unique_ptr<AsyncQueue<Ready>>> waiting_;
  std::optional<error_code> closed_;
};

}  // namespace hmc::runtime
