#include "world/connector.hpp"

#include <algorithm>
#include <boost/asio/as_tuple.hpp>

#include "hmc/error.hpp"
#include "hmc/runtime/deadline.hpp"
#include "hmc/runtime/log.hpp"
#include "peer_log.hpp"
#include "store/watch_ended.hpp"

namespace hmc::detail {

using std::chrono::milliseconds;

namespace {

milliseconds left(time_point deadline) {
  const auto now = std::chrono::steady_clock::now();
  return deadline <= now ? milliseconds(1) : std::max(milliseconds(1), std::chrono::ceil<milliseconds>(deadline - now));
}

std::string rank_name(std::uint32_t r) { return "rank " + std::to_string(r); }

}  // namespace

Connector::Connector(Session& session, Store* store, std::uint32_t rank, std::string prefix,
                     std::chrono::milliseconds timeout, std::function<void(std::uint32_t)> on_contact)
    : session_(session),
      store_(store),
      rank_(rank),
      prefix_(std::move(prefix)),
      timeout_(timeout),
      on_contact_(std::move(on_contact)) {}

Connector::~Connector() { stop(); }

std::string Connector::key(std::uint32_t rank, const std::string& what) const {
  return prefix_ + std::to_string(rank) + "/" + what;
}

void Connector::start() {
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      auto job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      lock.lock();
    }
  });
  if (store_ != nullptr) asio::co_spawn(session_.executor(), doorbells(), asio::detached);
}

void Connector::stop() {
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    first = !stopping_;
    stopping_ = true;
    jobs_.clear();
  }
  cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
  // The session only once: the destructor's call may come after the owner destroyed it.
  if (!first) return;
  asio::post(session_.executor(), [weak = weak_from_this()] {
    if (auto self = weak.lock()) self->stopped_ = true;
  });
}

void Connector::post(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void Connector::set_address(std::uint32_t r, PeerAddress a) {
  std::lock_guard<std::mutex> lock(mutex_);
  directory_[r] = std::move(a);
}

PeerAddress Connector::address_of(std::uint32_t peer, time_point deadline) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = directory_.find(peer); it != directory_.end()) return it->second;
  }
  if (store_ == nullptr) throw Fault{Status::NOT_CONNECTED, peer, "no address for " + rank_name(peer)};
  std::string text;
  try {
    text = store_->get(key(peer, "addr"), left(deadline));
  } catch (const TimeoutError& e) {
    throw Fault{Status::TIMEOUT, peer, rank_name(peer) + " never published its address: " + e.what()};
  } catch (const Error& e) {
    throw Fault{e.status(), rank_, std::string("reading an address from the store: ") + e.what()};
  }
  PeerAddress a;
  const auto space = text.find(' ');
  unsigned long port = 0;
  if (space != std::string::npos) {
    a.ip = text.substr(0, space);
    port = std::strtoul(text.c_str() + space + 1, nullptr, 10);
  }
  if (a.ip.empty() || port == 0 || port > 65535)
    throw Fault{Status::PROTOCOL_ERROR, peer, "malformed address of " + rank_name(peer) + " in the store: " + text};
  a.ctrl_port = static_cast<std::uint16_t>(port);
  set_address(peer, a);
  return a;
}

void Connector::dial(std::uint32_t peer, time_point deadline) {
  const PeerAddress a = address_of(peer, deadline);
  try {
    session_.connect(peer, rank_, a.ip, 0, a.ctrl_port);
  } catch (const Error& e) {
    const Status s = e.status() == Status::CLOSED || e.status() == Status::TIMEOUT ? e.status() : Status::PEER_LOST;
    throw Fault{
        s, s == Status::CLOSED ? rank_ : peer,
        "cannot connect to " + rank_name(peer) + " at " + a.ip + ":" + std::to_string(a.ctrl_port) + ": " + e.what()};
  }
}

void Connector::ring(std::uint32_t peer) {
  if (store_ == nullptr)
    throw Fault{Status::NOT_CONNECTED, peer,
                rank_name(peer) + " must dial this rank (the higher rank dials): call connect(" +
                    std::to_string(rank_) + ") there"};
  try {
    const auto k = store_->add(key(peer, "bells"), 1) - 1;
    store_->set(key(peer, "bell/" + std::to_string(k)), std::to_string(rank_));
  } catch (const Error& e) {
    throw Fault{e.status(), rank_, "asking " + rank_name(peer) + " to connect: " + e.what()};
  }
}

void Connector::connect_now(const std::vector<std::uint32_t>& peers, time_point deadline, bool ring_bell,
                            bool announce) {
  const auto have = session_.peers();
  auto linked = [&](std::uint32_t p) { return std::find(have.begin(), have.end(), p) != have.end(); };
  for (std::uint32_t p : peers) {
    if (p >= rank_ || linked(p)) continue;
    if (announce) ring(p);
    dial(p, deadline);
  }
  for (std::uint32_t p : peers) {
    if (p <= rank_ || linked(p)) continue;
    if (ring_bell || announce) ring(p);
    try {
      session_.wait_peer(p, left(deadline));
    } catch (const Error& e) {
      const Status s = e.status() == Status::CLOSED ? Status::CLOSED : Status::TIMEOUT;
      throw Fault{s, s == Status::CLOSED ? rank_ : p, rank_name(p) + " did not connect to this rank: " + e.what()};
    }
  }
}

asio::awaitable<std::optional<Fault>> Connector::connect(const std::vector<std::uint32_t>& wanted, time_point deadline,
                                                         bool ring_bell, bool announce) {
  using Outcome = std::optional<Fault>;
  auto self = shared_from_this();
  // Named, not a temporary: GCC 12 destroys a lambda temporary inside co_await twice.
  auto initiate = [self, peers = wanted, deadline, ring_bell, announce](auto handler) {
    auto h = std::make_shared<decltype(handler)>(std::move(handler));
    self->post([self, peers, deadline, ring_bell, announce, h] {
      Outcome f;
      try {
        self->connect_now(peers, deadline, ring_bell, announce);
      } catch (const Fault& e) {
        f = e;
      }
      asio::post(self->session_.executor(), [h, f]() mutable { std::move (*h)(f); });
    });
  };
  co_return co_await asio::async_initiate<decltype(asio::use_awaitable), void(Outcome)>(initiate, asio::use_awaitable);
}

asio::awaitable<void> Connector::doorbells() {
  auto self = shared_from_this();
  for (;;) {
    std::string bell = key(rank_, "bell/" + std::to_string(bells_seen_));
    auto [e, who] =
        co_await store_->async_get(std::move(bell), std::chrono::hours(1), asio::as_tuple(asio::use_awaitable));
    if (stopped_) co_return;
    if (e) {
      const auto ended = watch_ended(e);
      if (!ended) continue;
      runtime::log().info("rank {}: doorbell watch ended: {}", rank_, *ended);
      co_return;
    }
    ++bells_seen_;
    char* end = nullptr;
    const unsigned long q = std::strtoul(who.c_str(), &end, 10);
    if (who.empty() || *end != '\0' || q == rank_ || q > UINT32_MAX) continue;  // not a rank: not ours to act on
    const auto peer = static_cast<std::uint32_t>(q);
    post([self, peer] {
      try {
        self->connect_now({peer}, runtime::deadline_after(self->timeout_), false);
        if (self->on_contact_) self->on_contact_(peer);
      } catch (const Fault& f) {
        runtime::log().warn("rank {}: connecting to rank {} on its request failed: {}{}", self->rank_, peer, f.what,
                            detail::peer_fields(peer, "connect", f.status));
      }
    });
  }
}

}  // namespace hmc::detail
