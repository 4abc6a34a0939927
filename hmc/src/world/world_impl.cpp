// WorldImpl's construction and its connections: the connector, and aborts announced through the store.
#include "world/world_impl.hpp"

#include <boost/asio/as_tuple.hpp>
#include <cstdio>

#include "store/watch_ended.hpp"

namespace hmc::detail {

std::string rank_key(std::uint32_t rank, const char* what) { return "world/" + std::to_string(rank) + "/" + what; }

std::string rank_name(std::uint32_t r) { return "rank " + std::to_string(r); }

WorldImpl::WorldImpl(Session& s, Store* st, std::uint32_t r, std::uint32_t n, WorldOptions o)
    : session(s),
      store(st),
      rank(r),
      size(n),
      options(std::move(o)),
      ex(s.executor()),
      connector(std::make_shared<Connector>(s, st, r, "world/", options.timeout)) {}

WorldImpl::~WorldImpl() { connector->stop(); }

// -- connections ---------------------------------------------------------------------------------

asio::awaitable<void> WorldImpl::ensure(const std::vector<std::uint32_t>& wanted, time_point deadline) {
  std::vector<std::uint32_t> peers = wanted;
  std::erase_if(peers, [&](std::uint32_t p) { return connected.count(p) != 0; });
  if (peers.empty()) co_return;
  // The connects run on the connector thread; an abort announced through the store ends the wait
  // early (a rank waiting to be dialed has no connection an abort message could come on).
  auto wait = std::make_shared<ConnectWait>(ex);
  connector->post([connector = connector, peers, deadline, wait, ex = ex] {
    std::optional<Fault> f;
    try {
      connector->connect_now(peers, deadline, false);
    } catch (const Fault& e) {
      f = e;
    }
    asio::post(ex, [wait, f] {
      wait->outcome = f;
      wait->finished = true;
      wait->wake.cancel();
    });
  });
  waits_.insert(wait);
  while (!wait->finished && !aborted_) {
    wait->wake.expires_at(time_point::max());
    runtime::error_code ignored;
    co_await wait->wake.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
  }
  waits_.erase(wait);
  for (auto p : session.peers()) connected.insert(p);
  if (!wait->finished) throw *aborted_;
  if (wait->outcome) throw *wait->outcome;
}

void WorldImpl::start() {
  connector->start();
  if (store != nullptr) asio::co_spawn(ex, watch_aborts(), asio::detached);
}

// The first rank to fail publishes it in the store too; every rank parks a get on that key.
asio::awaitable<void> WorldImpl::watch_aborts() {
  auto self = shared_from_this();
  for (;;) {
    std::string key = "world/abort";
    auto [e, text] =
        co_await store->async_get(std::move(key), std::chrono::hours(1), asio::as_tuple(asio::use_awaitable));
    if (shut_) co_return;
    if (e) {
      if (!watch_ended(e)) continue;
      co_return;  // the store is gone: aborts still travel between connected peers
    }
    unsigned status = 0;
    unsigned long culprit = 0;
    char what[512] = {0};
    // Status 0 is success: no error to fail the world with.
    if (std::sscanf(text.c_str(), "%u %lu %511[^\n]", &status, &culprit, what) < 2 || status == 0 ||
        status > static_cast<unsigned>(Status::AUTH_FAILED))
      co_return;
    aborted_ = Fault{static_cast<Status>(status), static_cast<std::uint32_t>(culprit),
                     std::string(what) + " (announced through the store)"};
    for (const auto& w : waits_) w->wake.cancel();
    co_return;
  }
}

}  // namespace hmc::detail
