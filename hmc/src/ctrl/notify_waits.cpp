#include "ctrl/notify_waits.hpp"

#include <algorithm>
#include <vector>

#include "hmc/status.hpp"

namespace hmc::detail {

bool NotifyWaits::offer(std::uint64_t tag) {
  State& s = *state_;
  const bool wanted =
      std::any_of(s.waiting.begin(), s.waiting.end(), [&](const auto& w) { return w.second.tag == tag; });
  if (!wanted) return false;
  ++s.credit[tag];
  s.settle(tag);
  return true;
}

std::uint64_t NotifyWaits::wanted(std::uint64_t tag, std::uint64_t count) const {
  std::uint64_t missing = count;
  for (const auto& [id, w] : state_->waiting)
    if (w.tag == tag) missing += w.need;
  auto c = state_->credit.find(tag);
  const std::uint64_t have = c == state_->credit.end() ? 0 : c->second;
  return missing > have ? missing - have : 0;
}

void NotifyWaits::wait(std::uint64_t tag, std::uint64_t count, std::uint64_t found, std::chrono::nanoseconds timeout,
                       Handler h) {
  State& s = *state_;
  if (found != 0) s.credit[tag] += found;
  if (s.waiting.size() >= kMaxWaits)
    return runtime::complete_later(s.loop, std::move(h), make_error_code(Status::INVALID_ARGUMENT));
  const std::uint64_t id = s.next_id++;
  auto it = s.waiting.emplace(id, Waiter{tag, count, std::move(h), std::nullopt}).first;
  s.settle(tag);
  if (!s.waiting.contains(id)) return;
  if (s.reason) return s.finish(it, *s.reason);
  if (timeout != runtime::kNoTimeout) {
    it->second.timer.emplace(s.loop, timeout);
    it->second.timer->async_wait([weak = std::weak_ptr<State>(state_), id](const error_code& ec) {
      if (ec) return;
      auto st = weak.lock();
      if (!st) return;
      auto w = st->waiting.find(id);
      if (w != st->waiting.end()) st->finish(w, runtime::asio::error::timed_out);  // its credit stays
    });
  }
}

// Hands the tag's credit to its waits, oldest first, while it covers the oldest one's need.
void NotifyWaits::State::settle(std::uint64_t tag) {
  auto c = credit.find(tag);
  while (c != credit.end()) {
    auto oldest = std::find_if(waiting.begin(), waiting.end(), [&](const auto& w) { return w.second.tag == tag; });
    if (oldest == waiting.end() || c->second < oldest->second.need) break;
    c->second -= oldest->second.need;
    finish(oldest, error_code{});
  }
  if (c != credit.end() && c->second == 0) credit.erase(c);
}

void NotifyWaits::State::finish(std::map<std::uint64_t, Waiter>::iterator it, error_code ec) {
  Waiter w = std::move(it->second);
  waiting.erase(it);
  if (w.timer) w.timer->cancel();
  runtime::complete_later(loop, std::move(w.handler), ec);
}

void NotifyWaits::State::close(error_code why) {
  if (reason) return;
  reason = why;
  fail_all(why);
}

void NotifyWaits::State::fail_all(error_code why) {
  while (!waiting.empty()) finish(waiting.begin(), why);
}

}  // namespace hmc::detail
