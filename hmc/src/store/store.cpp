#include "hmc/store/store.hpp"

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <future>

#include "hmc/error.hpp"
#include "hmc/runtime/deadline.hpp"
#include "hmc/runtime/event_loop.hpp"
#include "store/etcd_store_client.hpp"
#include "store/tcp_store_client.hpp"

namespace hmc {

namespace detail {

namespace wire = store_wire;

class StoreState {
 public:
  runtime::loop_executor ex;
  StoreOptions options;
  std::string url;
  std::shared_ptr<StoreBackend> backend;
  std::string local_address;
  bool closed = false;

  explicit StoreState(runtime::loop_executor e) : ex(e) {}
};

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

std::uint16_t parse_port(const std::string& text, const std::string& url) {
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || value == 0 || value > 65535)
    throw InvalidConfigError("store URL " + url + ": '" + text + "' is not a port (1..65535)");
  return static_cast<std::uint16_t>(value);
}

std::pair<std::string, std::uint16_t> parse_host_port(const std::string& hp, const std::string& url) {
  std::string host, port;
  if (!hp.empty() && hp.front() == '[') {  // [IPv6]:port
    const auto close = hp.find(']');
    if (close == std::string::npos || close + 1 >= hp.size() || hp[close + 1] != ':')
      throw InvalidConfigError("store URL " + url + ": expected [address]:port, got '" + hp + "'");
    host = hp.substr(1, close - 1);
    port = hp.substr(close + 2);
  } else {
    const auto colon = hp.rfind(':');
    if (colon == std::string::npos || hp.find(':') != colon)
      throw InvalidConfigError("store URL " + url + ": expected host:port, got '" + hp + "'");
    host = hp.substr(0, colon);
    port = hp.substr(colon + 1);
  }
  if (host.empty()) throw InvalidConfigError("store URL " + url + ": empty host");
  for (char c : host)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == ':' || c == '_'))
      throw InvalidConfigError("store URL " + url + ": bad character in host '" + host + "'");
  return {host, parse_port(port, url)};
}

}  // namespace
}  // namespace detail

StoreAddress parse_store_url(const std::string& url) {
  StoreAddress a;
  a.url = url;
  const auto sep = url.find("://");
  if (sep == std::string::npos)
    throw InvalidConfigError("store URL '" + url + "': expected tcp://host:port, etcd://host:port[,...] or env://");
  const std::string scheme = url.substr(0, sep);
  const std::string rest = url.substr(sep + 3);
  if (scheme == "env") {
    if (!rest.empty()) throw InvalidConfigError("store URL " + url + ": env:// takes nothing after it");
    const std::string addr = detail::env_or("MASTER_ADDR", "");
    const std::string port = detail::env_or("MASTER_PORT", "");
    if (addr.empty() || port.empty())
      throw InvalidConfigError("store URL env://: MASTER_ADDR and MASTER_PORT must be set (torchrun sets them)");
    std::uint16_t p = detail::parse_port(port, url + " (MASTER_PORT)");
    // Under torchrun's agent store MASTER_PORT is taken by torch's own TCPStore: use the next port.
    if (const std::string own = detail::env_or("HMC_STORE_PORT", ""); !own.empty()) {
      p = detail::parse_port(own, url + " (HMC_STORE_PORT)");
    } else if (detail::env_or("TORCHELASTIC_USE_AGENT_STORE", "") == "True") {
      if (p == 65535) throw InvalidConfigError("store URL env://: MASTER_PORT 65535 leaves no port for HMC's store");
      ++p;
    }
    a.scheme = "tcp";
    a.endpoints.emplace_back(addr, p);
    return a;
  }
  if (scheme != "tcp" && scheme != "etcd")
    throw InvalidConfigError("store URL " + url + ": unknown scheme '" + scheme + "' (tcp, etcd or env)");
  a.scheme = scheme;
  std::string list = rest;
  if (!list.empty() && list.back() == '/') list.pop_back();
  std::size_t start = 0;
  while (start <= list.size()) {
    const auto comma = list.find(',', start);
    const std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    a.endpoints.push_back(detail::parse_host_port(item, url));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (scheme == "tcp" && a.endpoints.size() != 1)
    throw InvalidConfigError("store URL " + url + ": tcp:// takes exactly one host:port");
  return a;
}

Store::Store(const std::string& url, StoreOptions options) { open(url, std::move(options), nullptr); }

Store::Store(const std::string& url, StoreOptions options, runtime::EventLoop& loop) {
  open(url, std::move(options), &loop);
}

void Store::open(const std::string& url, StoreOptions options, runtime::EventLoop* loop) {
  const StoreAddress address = parse_store_url(url);  // before any thread starts: a bad URL costs nothing
  if (address.scheme != "tcp" && options.tls.configured())
    throw InvalidConfigError("store " + url + ": TLS (StoreOptions::tls) is for hmc's own store (tcp://, env://)");
  if (loop == nullptr) {
    own_loop_ = std::make_unique<runtime::EventLoop>();
    own_loop_->start();
    loop = own_loop_.get();
  }
  loop_ = loop;
  const runtime::loop_executor executor = loop->executor();
  state_ = std::make_shared<detail::StoreState>(executor);
  if (options.job_id.empty())
    options.job_id = detail::env_or("HMC_JOB_ID", detail::env_or("TORCHELASTIC_RUN_ID", "hmc"));
  if (options.job_id.find('/') != std::string::npos)
    throw InvalidConfigError("store job id '" + options.job_id + "' must not contain '/'");
  state_->options = options;
  state_->url = url;
  if (loop->in_loop_thread()) throw InvalidArgumentError("Store: construct it off its loop thread (connecting blocks)");

  std::promise<std::exception_ptr> connected;
  auto result = connected.get_future();
  runtime::asio::co_spawn(
      executor,
      [state = state_, address, &connected]() -> runtime::asio::awaitable<void> {
        const auto& o = state->options;
        std::exception_ptr e;
        try {
          if (address.scheme == "tcp") {
            auto c = std::make_shared<detail::TcpStoreClient>(state->ex, address.url, address.endpoints[0].first,
                                                              address.endpoints[0].second, o);
            e = co_await c->connect(o.timeout);
            state->backend = c;
          } else {
            auto c = std::make_shared<detail::EtcdStoreClient>(state->ex, address.url, address.endpoints, o);
            e = co_await c->connect(o.timeout);
            state->backend = c;
          }
          if (!e) state->local_address = state->backend->local_address();
        } catch (...) {
          e = std::current_exception();
        }
        connected.set_value(e);
      },
      runtime::asio::detached);
  loop->wait(result, std::chrono::steady_clock::time_point::max());  // the connect times itself out
  if (auto e = result.get()) {
    close();
    std::rethrow_exception(e);
  }
}

Store::~Store() {
  close();
  if (own_loop_) own_loop_->stop();
}

const std::string& Store::url() const noexcept { return state_->url; }
const std::string& Store::job_id() const noexcept { return state_->options.job_id; }
const StoreOptions& Store::options() const noexcept { return state_->options; }
runtime::loop_executor Store::executor() const noexcept { return state_->ex; }
std::string Store::local_address() const { return state_->local_address; }

void Store::close() {
  if (!state_) return;
  loop_->call([s = state_] {
    if (s->closed) return;
    s->closed = true;
    if (s->backend) s->backend->close();
  });
}

void Store::start_on_loop(const std::shared_ptr<detail::StoreState>& state, OpCode op, std::vector<std::string> keys,
                          std::string value, std::string expected, std::int64_t delta,
                          std::chrono::milliseconds timeout, any_result done) {
  namespace wire = detail::store_wire;
  auto fail = [&](std::exception_ptr e) {
    runtime::complete_later(state->ex, std::move(done), e, std::string{}, std::int64_t{0}, false);
  };
  if (state->closed || !state->backend)
    return fail(std::make_exception_ptr(ClosedError("store " + state->url + ": closed")));
  wire::Request r;
  switch (op) {
    case op_set: r.op = wire::Op::set; break;
    case op_get: r.op = wire::Op::get; break;
    case op_wait: r.op = wire::Op::wait; break;
    case op_add: r.op = wire::Op::add; break;
    case op_compare_set: r.op = wire::Op::compare_set; break;
    case op_erase: r.op = wire::Op::erase; break;
    case op_check: r.op = wire::Op::check; break;
  }
  const std::string prefix = state->options.job_id + "/";
  if (keys.empty()) return fail(std::make_exception_ptr(InvalidArgumentError("store " + state->url + ": no key")));
  for (auto& k : keys) {
    if (k.empty()) return fail(std::make_exception_ptr(InvalidArgumentError("store " + state->url + ": empty key")));
    k = prefix + k;
  }
  if (timeout.count() < 0 || timeout > wire::kMaxWait) timeout = wire::kMaxWait;
  if (op == op_wait || op == op_check) {
    r.keys = std::move(keys);
  } else {
    r.key = std::move(keys.front());
  }
  r.value = std::move(value);
  r.expected = std::move(expected);
  r.delta = delta;
  r.timeout = timeout;
  state->backend->start(std::move(r),
                        [done = std::move(done), prefix](std::exception_ptr e, wire::Reply reply) mutable {
                          std::move(done)(e, std::move(reply.value), reply.number, reply.flag);
                        });
}

template <class T, class F>
T Store::blocking(const char* what, std::chrono::milliseconds timeout, F start_op) {
  if (loop_->in_loop_thread())
    throw InvalidArgumentError(std::string("Store::") + what +
                               " blocks: call it off the loop thread (or co_await async_*)");
  auto f = start_op();
  // The operation times itself out (with its context); this wait only guards against a lost reply.
  const auto guard = timeout + std::chrono::seconds(10);
  if (!loop_->wait(f, runtime::deadline_after(guard)))
    throw TimeoutError("store " + state_->url + ": " + what + " not complete after " + std::to_string(guard.count()) +
                       " ms");
  return f.get();
}

void Store::set(const std::string& key, const std::string& value) {
  blocking<void>("set", options().timeout, [&] { return async_set(key, value, runtime::asio::use_future); });
}

std::string Store::get(const std::string& key) { return get(key, options().timeout); }

std::string Store::get(const std::string& key, std::chrono::milliseconds timeout) {
  return blocking<std::string>("get", timeout, [&] { return async_get(key, timeout, runtime::asio::use_future); });
}

void Store::wait(const std::vector<std::string>& keys) { wait(keys, options().timeout); }

void Store::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  blocking<void>("wait", timeout, [&] { return async_wait(keys, timeout, runtime::asio::use_future); });
}

std::int64_t Store::add(const std::string& key, std::int64_t delta) {
  return blocking<std::int64_t>("add", options().timeout,
                                [&] { return async_add(key, delta, runtime::asio::use_future); });
}

std::string Store::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  return blocking<std::string>("compare_set", options().timeout,
                               [&] { return async_compare_set(key, expected, desired, runtime::asio::use_future); });
}

bool Store::erase(const std::string& key) {
  return blocking<bool>("erase", options().timeout, [&] { return async_erase(key, runtime::asio::use_future); });
}

bool Store::check(const std::vector<std::string>& keys) {
  return blocking<bool>("check", options().timeout, [&] { return async_check(keys, runtime::asio::use_future); });
}

}  // namespace hmc
