#include "store/tcp_store_client.hpp"

#include <algorithm>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ssl/error.hpp>

#include "hmc/runtime/deadline.hpp"
#include "hmc/runtime/log.hpp"
#include "security/tls_context.hpp"
#include "store/store_handshake.hpp"

namespace hmc::detail {

namespace asio = runtime::asio;
namespace wire = store_wire;
using tcp = asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;
using std::chrono::milliseconds;

namespace {

// How much longer than its own wait the client gives a parked request before giving up on the
// server: the server's TimeoutError (with the missing keys) is what the caller should see.
constexpr milliseconds kReplyGrace{5000};

const char* op_name(wire::Op op) {
  switch (op) {
    case wire::Op::set: return "set";
    case wire::Op::get: return "get";
    case wire::Op::wait: return "wait";
    case wire::Op::add: return "add";
    case wire::Op::compare_set: return "compare_set";
    case wire::Op::erase: return "erase";
    case wire::Op::check: return "check";
  }
  return "?";
}

milliseconds left_until(runtime::steady_clock::time_point deadline) {
  const auto now = runtime::steady_clock::now();
  return deadline <= now ? milliseconds(0) : std::chrono::duration_cast<milliseconds>(deadline - now);
}

}  // namespace

TcpStoreClient::TcpStoreClient(runtime::loop_executor ex, std::string url, std::string host, std::uint16_t port,
                               const StoreOptions& options)
    : ex_(ex), url_(std::move(url)), host_(std::move(host)), port_(port), options_(options) {
  if (options_.authenticate) key_ = resolve_auth_key(options_.auth_key, nullptr, "StoreOptions::auth_key");
  tls_ = make_tls_context(options_.tls, "store TLS (StoreOptions::tls)");
}

asio::awaitable<std::exception_ptr> TcpStoreClient::connect(milliseconds timeout) {
  auto self = shared_from_this();
  const auto deadline = runtime::deadline_after(timeout);
  milliseconds pause{20};
  std::string last = "no attempt";
  for (;;) {
    const milliseconds attempt = std::min(left_until(deadline), milliseconds(5000));
    auto try_once = [&]() -> asio::awaitable<std::string> {
      runtime::error_code ec;
      tcp::resolver resolver(ex_);
      const std::string service = std::to_string(port_);  // a named local: GCC 12 and co_await temporaries
      auto endpoints = co_await resolver.async_resolve(host_, service, asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return "cannot resolve " + host_ + ": " + ec.message();
      tcp::socket s(ex_);
      co_await asio::async_connect(s, endpoints, asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return ec.message();
      s.set_option(tcp::no_delay(true), ec);
      auto local = s.local_endpoint(ec);
      if (!ec) local_address_ = local.address().to_string();
      stream_ = std::make_shared<StoreStream>(std::move(s), 4 * limits_.max_value + (1u << 20));
      co_return std::string{};
    };
    asio::steady_timer t(ex_, attempt);
    auto r = co_await (try_once() || t.async_wait(asio::use_awaitable));
    std::string why = r.index() == 1 ? "no answer within " + std::to_string(attempt.count()) + " ms" : std::get<0>(r);
    if (why.empty()) {
      bool refused = false;
      asio::steady_timer hs_deadline(ex_, std::max(left_until(deadline), milliseconds(1000)));
      auto h = co_await (secure_handshake(refused) || hs_deadline.async_wait(asio::use_awaitable));
      why = h.index() == 1 ? "no handshake answer" : std::get<0>(h);
      if (why.empty()) {
        asio::co_spawn(ex_, read_loop(), asio::detached);
        co_return nullptr;
      }
      stream_->close();
      if (refused) co_return store_error(Status::AUTH_FAILED, "store " + url_ + ": " + why);
    }
    last = why;
    const auto unreachable = [&] {
      return store_error(Status::NOT_CONNECTED, "store " + url_ + " unreachable for " +
                                                    std::to_string(timeout.count()) + " ms (last: " + last + ")");
    };
    if (left_until(deadline).count() == 0) co_return unreachable();
    asio::steady_timer wait(ex_, std::min(pause, left_until(deadline)));
    runtime::error_code ignored;
    co_await wait.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
    // A last attempt with no time left would only replace the reason with "no answer within 0 ms".
    if (left_until(deadline).count() == 0) co_return unreachable();
    pause = std::min(pause * 2, milliseconds(500));
  }
}

// TLS first where configured, then the key handshake inside it. A TLS alert, during the TLS
// handshake or at the first read after it (TLS 1.3 servers check the client's certificate then), is
// the server refusing us: retrying cannot help. A plain end of the connection may be a server
// shedding load, and is retried.
asio::awaitable<std::string> TcpStoreClient::secure_handshake(bool& auth_refused) {
  const auto is_alert = [](const runtime::error_code& ec) { return ec.category() == asio::error::get_ssl_category(); };
  if (tls_) {
    const runtime::error_code ec = co_await stream_->tls_handshake(*tls_, asio::ssl::stream_base::client);
    if (ec) {
      auth_refused = is_alert(ec);
      co_return "TLS handshake failed: " + ec.message() + (auth_refused ? "" : " (does the store serve TLS?)");
    }
  }
  std::string why = co_await handshake(auth_refused);
  if (!why.empty() && tls_ && is_alert(stream_->read_error())) {
    auth_refused = true;
    why = "TLS: the store refused this client's certificate (" + stream_->read_error().message() + ")";
  }
  co_return why;
}

asio::awaitable<std::string> TcpStoreClient::handshake(bool& auth_refused) {
  const Nonce mine = random_nonce();
  std::vector<std::byte> hello(mine.begin(), mine.end());
  hello.push_back(std::byte{options_.authenticate ? std::uint8_t{1} : std::uint8_t{0}});
  stream_->write(wire::encode_frame(wire::FrameType::hello, 0, hello));
  wire::Header h;
  std::vector<std::byte> p;
  const milliseconds frame_time{5000};
  if (auto why = co_await stream_->read(4096, frame_time, h, p); !why.empty()) co_return why;
  auto rejected = [&]() -> std::string {
    auth_refused = true;
    return "refused: " + std::string(reinterpret_cast<const char*>(p.data()), p.size());
  };
  if (h.type == wire::FrameType::reject) co_return rejected();
  if (options_.authenticate) {
    if (h.type != wire::FrameType::challenge || p.size() != kStoreChallengeSize) {
      auth_refused = true;
      co_return std::string("the server sent no authentication challenge (not an HMC store?)");
    }
    Nonce theirs{};
    std::copy_n(p.begin(), theirs.size(), theirs.begin());
    stream_->write(wire::encode_frame(wire::FrameType::proof, 0, store_client_proof(key_, theirs, mine)));
    if (auto why = co_await stream_->read(4096, frame_time, h, p); !why.empty()) co_return why;
    if (h.type == wire::FrameType::reject) co_return rejected();
    Mac proof{};
    if (h.type != wire::FrameType::welcome || p.size() != kStoreWelcomeSize) {
      auth_refused = true;
      co_return std::string("the server answered the proof without proving the key (not an HMC store?)");
    }
    std::copy_n(p.begin(), proof.size(), proof.begin());
    if (!macs_equal(proof, store_server_proof(key_, mine, theirs))) {
      auth_refused = true;
      co_return std::string("authentication failed: the server does not hold this client's key");
    }
  }
  if (h.type != wire::FrameType::welcome) {
    auth_refused = true;
    co_return "unexpected frame type " + std::to_string(static_cast<int>(h.type)) + " in the handshake";
  }
  co_return std::string{};
}

asio::awaitable<void> TcpStoreClient::read_loop() {
  auto self = shared_from_this();
  auto stream = stream_;
  std::string why;
  while (why.empty()) {
    wire::Header h;
    std::vector<std::byte> payload;
    why = co_await stream->read(limits_.max_frame(), milliseconds(30000), h, payload);
    if (!why.empty()) break;
    wire::Reply r;
    if (h.type != wire::FrameType::reply) {
      why = "unexpected frame type " + std::to_string(static_cast<int>(h.type));
    } else if (auto bad = wire::decode_reply(payload, limits_, r); !bad.empty()) {
      why = "malformed reply: " + bad;
    } else {
      complete(h.id, nullptr, std::move(r));
    }
  }
  if (broken_.empty()) {
    broken_ = why;
    stream->close();
    // Only a loss that fails requests is worth a warning; an idle client outliving the store is
    // normal, and so is one whose only requests wait on keys (a job's store host leaving first).
    const bool only_waits =
        std::all_of(pending_.begin(), pending_.end(), [](const auto& p) { return p.second->waits; });
    if (only_waits) {
      runtime::log().info("store {}: connection ended with {} waits pending: {}", url_, pending_.size(), why);
    } else {
      runtime::log().warn("store {}: connection lost with {} requests pending: {}", url_, pending_.size(), why);
    }
    fail_all(Status::NOT_CONNECTED, "connection lost (" + why + ")");
  }
}

void TcpStoreClient::start(wire::Request request, Done done) {
  const std::string what = "store " + url_ + ": " + op_name(request.op) + " " +
                           (request.key.empty() && !request.keys.empty() ? request.keys.front() : request.key);
  if (!broken_.empty() || !stream_) {
    runtime::complete_later(ex_, std::move(done),
                            store_error(broken_ == "closed" ? Status::CLOSED : Status::NOT_CONNECTED,
                                        what + ": " + (broken_.empty() ? "not connected" : broken_)),
                            wire::Reply{});
    return;
  }
  const std::uint32_t id = next_id_++;
  auto p = std::make_unique<Pending>();
  p->done.emplace(std::move(done));
  p->what = what;
  const bool waits = request.op == wire::Op::get || request.op == wire::Op::wait;
  p->waits = waits;
  const milliseconds limit = waits ? request.timeout + kReplyGrace : options_.timeout;
  p->timer.emplace(ex_, limit);
  p->timer->async_wait([weak = weak_from_this(), id, limit](const runtime::error_code& ec) {
    auto s = weak.lock();
    if (ec || !s) return;
    auto it = s->pending_.find(id);
    if (it == s->pending_.end()) return;
    s->complete(
        id,
        store_error(Status::TIMEOUT, it->second->what + ": no reply within " + std::to_string(limit.count()) + " ms"),
        wire::Reply{});
  });
  pending_.emplace(id, std::move(p));
  stream_->write(wire::encode_frame(wire::FrameType::request, id, wire::encode_request(request)));
}

void TcpStoreClient::complete(std::uint32_t id, std::exception_ptr e, wire::Reply r) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;  // a reply after our own timeout
  auto p = std::move(it->second);
  pending_.erase(it);
  p->timer->cancel();
  if (!e && r.status != Status::SUCCESS) e = store_error(r.status, p->what + ": " + r.value);
  runtime::complete_later(ex_, std::move(*p->done), e, std::move(r));
}

void TcpStoreClient::fail_all(Status s, const std::string& why) {
  std::vector<std::uint32_t> ids;
  for (const auto& [id, p] : pending_) ids.push_back(id);
  for (auto id : ids) {
    const std::string what = pending_.at(id)->what;
    complete(id, store_error(s, what + ": " + why), wire::Reply{});
  }
}

void TcpStoreClient::close() {
  if (broken_ == "closed") return;
  broken_ = "closed";
  if (stream_) stream_->close();
  fail_all(Status::CLOSED, "the store client was closed");
}

}  // namespace hmc::detail
