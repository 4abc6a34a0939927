#include "metrics/metrics_endpoint.hpp"

#include <string_view>
#include <utility>
#include <vector>

#include "hmc/error.hpp"
#include "hmc/runtime/log.hpp"
#include "metrics/exposition.hpp"

namespace hmc::detail {

namespace asio = runtime::asio;
using tcp = asio::ip::tcp;

namespace {
constexpr std::size_t kMaxRequest = 8192;
constexpr std::size_t kMaxConnections = 16;
constexpr std::chrono::seconds kRequestTime{2};

std::string response(std::string_view status, std::string_view type, const std::string& body) {
  return std::string("HTTP/1.1 ") + std::string(status) + "\r\nContent-Type: " + std::string(type) +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}
}  // namespace

struct MetricsEndpoint::State : std::enable_shared_from_this<MetricsEndpoint::State> {
  explicit State(runtime::loop_executor e) : ex(e) {}

  asio::awaitable<void> accept_loop(MetricsEndpoint* owner) {
    auto self = shared_from_this();
    for (;;) {
      runtime::error_code ec;
      tcp::socket s = co_await acceptor->async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (closed || ec == asio::error::operation_aborted) co_return;
      if (ec) {
        asio::steady_timer pause(ex, std::chrono::milliseconds(10));  // e.g. out of fds: don't spin
        co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        continue;
      }
      if (open >= kMaxConnections) {
        s.close(ec);
        continue;
      }
      ++open;
      asio::co_spawn(ex, serve(owner, std::move(s)), asio::detached);
    }
  }

  // One request, one answer, then close; a request that is not whole within kRequestTime is dropped.
  asio::awaitable<void> serve(MetricsEndpoint* owner, tcp::socket socket) {
    auto self = shared_from_this();
    // Shared with the deadline's handler, which may run after this frame is gone: it holds a weak one.
    auto s = std::make_shared<tcp::socket>(std::move(socket));
    asio::steady_timer deadline(ex, kRequestTime);
    deadline.async_wait([weak = std::weak_ptr<tcp::socket>(s)](const runtime::error_code& ec) {
      if (auto open_socket = weak.lock(); open_socket && !ec) open_socket->close();
    });
    std::string request;
    runtime::error_code ec;
    char buf[1024];
    while (request.find("\r\n\r\n") == std::string::npos && request.size() < kMaxRequest) {
      const std::size_t n =
          co_await s->async_read_some(asio::buffer(buf), asio::redirect_error(asio::use_awaitable, ec));
      if (ec) break;
      request.append(buf, n);
    }
    if (!ec && !closed) {
      const std::string line = request.substr(0, request.find("\r\n"));
      std::string answer;
      if (request.find("\r\n\r\n") == std::string::npos) {
        answer = response("431 Request Header Fields Too Large", "text/plain", "request over 8 KiB\n");
      } else if (line.rfind("GET ", 0) != 0) {
        answer = response("405 Method Not Allowed", "text/plain", "GET /metrics only\n");
      } else if (line.rfind("GET /metrics ", 0) != 0 && line.rfind("GET /metrics?", 0) != 0) {
        answer = response("404 Not Found", "text/plain", "GET /metrics only\n");
      } else {
        answer = response("200 OK", "text/plain; version=0.0.4; charset=utf-8", owner->render());
      }
      co_await asio::async_write(*s, asio::buffer(answer), asio::redirect_error(asio::use_awaitable, ec));
    }
    deadline.cancel();
    s->close(ec);
    --open;
  }

  runtime::loop_executor ex;
  std::optional<tcp::acceptor> acceptor;
  std::size_t open = 0;
  bool closed = false;
};

namespace {
std::mutex registry_mutex;
std::map<std::string, std::weak_ptr<MetricsEndpoint>>& registry() {
  static std::map<std::string, std::weak_ptr<MetricsEndpoint>> endpoints;
  return endpoints;
}
}  // namespace

std::shared_ptr<MetricsEndpoint> MetricsEndpoint::at(const std::string& host, std::uint16_t port) {
  const std::string where = host + ":" + std::to_string(port);
  std::lock_guard lock(registry_mutex);
  if (auto existing = registry()[where].lock()) return existing;
  std::shared_ptr<MetricsEndpoint> e(new MetricsEndpoint(host, port));
  registry()[where] = e;
  return e;
}

MetricsEndpoint::MetricsEndpoint(const std::string& host, std::uint16_t port) {
  loop_.start();
  state_ = std::make_shared<State>(loop_.executor());
  const std::string where = host + ":" + std::to_string(port);
  port_ = loop_.call([&]() -> std::uint16_t {
    runtime::error_code ec;
    const auto addr = asio::ip::make_address(host, ec);
    if (ec) throw InvalidConfigError("metrics: '" + host + "' is not an IP address");
    tcp::acceptor acc(state_->ex);
    const tcp::endpoint ep(addr, port);
    acc.open(ep.protocol(), ec);
    if (!ec) acc.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acc.bind(ep, ec);
    if (!ec) acc.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) throw InvalidConfigError("metrics cannot listen on http://" + where + ": " + ec.message());
    const std::uint16_t bound = acc.local_endpoint().port();
    state_->acceptor.emplace(std::move(acc));
    asio::co_spawn(state_->ex, state_->accept_loop(this), asio::detached);
    return bound;
  });
  runtime::log().info("metrics at http://{}:{}/metrics", host, port_);
}

MetricsEndpoint::~MetricsEndpoint() {
  loop_.call([&] {
    state_->closed = true;
    runtime::error_code ec;
    if (state_->acceptor) state_->acceptor->close(ec);
  });
  loop_.stop();
}

std::uint64_t MetricsEndpoint::add(Source source) {
  std::lock_guard lock(sources_mutex_);
  const std::uint64_t id = next_id_++;
  sources_.emplace(id, std::move(source));
  return id;
}

void MetricsEndpoint::remove(std::uint64_t id) {
  std::lock_guard lock(sources_mutex_);
  sources_.erase(id);
}

std::string MetricsEndpoint::render() {
  std::vector<std::pair<std::string, SessionStats>> all;
  std::lock_guard lock(sources_mutex_);
  for (const auto& [id, source] : sources_)
    if (std::optional<SessionStats> s = source()) all.emplace_back(std::to_string(id), std::move(*s));
  return exposition(all);
}

}  // namespace hmc::detail
