#include "store/etcd_store_client.hpp"

#include "store/base64.hpp"

#include <sys/socket.h>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <boost/json/src.hpp>  // Boost.JSON header-only: this is its one translation unit
#include <charconv>
#include <set>

#include "hmc/runtime/deadline.hpp"
#include "hmc/runtime/log.hpp"

namespace hmc::detail {

namespace asio = runtime::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
namespace wire = store_wire;
using tcp = asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;
using std::chrono::milliseconds;
using time_point = runtime::steady_clock::time_point;

namespace {

constexpr std::size_t kMaxResponse = std::size_t{64} << 20;  // a range reply carries one value (<= 16 MiB) in base64

// etcd's replies to our single-key requests are a few dozen JSON elements around one base64
// value. Parsing costs ~50 bytes per element, so a reply of millions of tiny elements (30 M in
// 64 MiB would take 1.5 GiB) is refused by counting them before any is built.
constexpr std::size_t kMaxReplyElements = 4096;
constexpr std::size_t kMaxWatchElements = 65536;  // the whole watch stream: events for one key

// Counts JSON elements (commas, colons, brackets outside strings) across the pieces fed to it.
class JsonElementCount {
 public:
  explicit JsonElementCount(std::size_t limit) : limit_(limit) {}
  // False once the bytes fed so far hold more than the limit.
  bool feed(std::string_view text) noexcept {
    for (const char c : text) {
      if (in_string_) {
        if (escaped_) {
          escaped_ = false;
        } else if (c == '\\') {
          escaped_ = true;
        } else if (c == '"') {
          in_string_ = false;
        }
      } else if (c == '"') {
        in_string_ = true;
      } else if (c == ',' || c == ':' || c == '[' || c == '{') {
        ++count_;
      }
    }
    return count_ <= limit_;
  }

 private:
  std::size_t limit_;
  std::size_t count_ = 0;
  bool in_string_ = false;
  bool escaped_ = false;
};

milliseconds left_until(time_point deadline) {
  const auto now = runtime::steady_clock::now();
  return deadline <= now ? milliseconds(0) : std::chrono::duration_cast<milliseconds>(deadline - now);
}

// etcd's JSON carries 64-bit integers as strings.
std::int64_t int_field(const json::object& o, const char* name) {
  const auto* v = o.if_contains(name);
  if (v == nullptr) return 0;
  if (v->is_int64()) return v->as_int64();
  if (!v->is_string()) return 0;
  const auto& s = v->as_string();
  std::int64_t out = 0;
  std::from_chars(s.data(), s.data() + s.size(), out);
  return out;
}

const json::object* object_field(const json::object& o, const char* name) {
  const auto* v = o.if_contains(name);
  return v != nullptr && v->is_object() ? &v->as_object() : nullptr;
}

const json::array* array_field(const json::object& o, const char* name) {
  const auto* v = o.if_contains(name);
  return v != nullptr && v->is_array() ? &v->as_array() : nullptr;
}

bool bool_field(const json::object& o, const char* name) {
  const auto* v = o.if_contains(name);
  return v != nullptr && v->is_bool() && v->as_bool();
}

std::string string_field(const json::object& o, const char* name) {
  const auto* v = o.if_contains(name);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : std::string{};
}

}  // namespace

struct EtcdStoreClient::Impl : std::enable_shared_from_this<Impl> {
  using Socket = std::shared_ptr<tcp::socket>;

  struct Response {
    std::string error;  // empty: body holds the JSON object
    json::object body;
    bool refused = false;  // a whole reply came, but not JSON we accept: asking again cannot help
  };

  Impl(runtime::loop_executor e, std::string u, std::vector<std::pair<std::string, std::uint16_t>> eps,
       const StoreOptions& o)
      : ex(e), url(std::move(u)), endpoints(std::move(eps)), options(o), keepalive(e) {}

  runtime::loop_executor ex;
  std::string url;
  std::vector<std::pair<std::string, std::uint16_t>> endpoints;
  StoreOptions options;
  std::size_t current = 0;  // the endpoint in use; the next one after a failure
  std::string lease = "0";
  std::vector<Socket> idle;
  std::set<Socket> live;  // every open socket, closed by close()
  asio::steady_timer keepalive;
  std::string local_address;
  bool closed = false;

  std::string where() const {
    const auto& [h, p] = endpoints[current];
    return h + ":" + std::to_string(p);
  }

  Socket track(Socket s) {
    live.insert(s);
    return s;
  }
  void forget(const Socket& s) {
    runtime::error_code ignored;
    s->close(ignored);
    live.erase(s);
  }

  // A connected socket to the first endpoint that answers, starting at the current one.
  asio::awaitable<std::pair<Socket, std::string>> open(time_point deadline, bool allow_idle = true) {
    if (allow_idle && !idle.empty()) {
      auto s = idle.back();
      idle.pop_back();
      co_return std::pair{s, std::string{}};
    }
    std::string last;
    for (std::size_t tries = 0; tries < endpoints.size(); ++tries) {
      const auto [host, port] = endpoints[current];
      auto attempt = [&]() -> asio::awaitable<std::pair<Socket, std::string>> {
        runtime::error_code ec;
        tcp::resolver resolver(ex);
        const std::string service = std::to_string(port);
        auto eps = co_await resolver.async_resolve(host, service, asio::redirect_error(asio::use_awaitable, ec));
        if (ec) co_return std::pair{Socket{}, "cannot resolve " + host + ": " + ec.message()};
        auto s = track(std::make_shared<tcp::socket>(ex));
        co_await asio::async_connect(*s, eps, asio::redirect_error(asio::use_awaitable, ec));
        if (ec) {
          forget(s);
          co_return std::pair{Socket{}, host + ":" + std::to_string(port) + ": " + ec.message()};
        }
        s->set_option(tcp::no_delay(true), ec);
        if (auto local = s->local_endpoint(ec); !ec) local_address = local.address().to_string();
        co_return std::pair{s, std::string{}};
      };
      asio::steady_timer t(ex, std::min(left_until(deadline), milliseconds(5000)));
      auto r = co_await (attempt() || t.async_wait(asio::use_awaitable));
      if (r.index() == 0 && std::get<0>(r).first) co_return std::get<0>(r);
      last = r.index() == 1 ? where() + ": no answer" : std::get<0>(r).second;
      current = (current + 1) % endpoints.size();
      if (left_until(deadline).count() == 0) break;
    }
    co_return std::pair{Socket{}, last};
  }

  static std::string request_text(const std::string& host, const char* path, const std::string& body) {
    return std::string("POST ") + path + " HTTP/1.1\r\nHost: " + host + "\r\nContent-Type: application/json\r\n" +
           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  }

  // MSG_NOSIGNAL: etcd dying mid-request must fail the send, never raise SIGPIPE.
  static asio::awaitable<runtime::error_code> send_all(tcp::socket& s, const std::string& text) {
    runtime::error_code ec;
    std::size_t sent = 0;
    while (sent < text.size() && !ec)
      sent += co_await s.async_send(asio::buffer(text.data() + sent, text.size() - sent), MSG_NOSIGNAL,
                                    asio::redirect_error(asio::use_awaitable, ec));
    co_return ec;
  }

  static std::string parse_object(std::string_view text, json::object& out) {
    if (!JsonElementCount(kMaxReplyElements).feed(text))
      return "etcd's reply holds more than " + std::to_string(kMaxReplyElements) + " JSON elements (refused unparsed)";
    json::parse_options po;
    po.max_depth = 32;
    runtime::error_code ec;
    json::value v = json::parse(text, ec, {}, po);
    if (ec) return "malformed JSON from etcd: " + ec.message();
    if (!v.is_object()) return "etcd replied with JSON that is not an object";
    out = std::move(v.as_object());
    return {};
  }

  // One unary request; the socket goes back to the pool when the exchange was clean.
  asio::awaitable<Response> call(const char* path, const json::object& body, time_point deadline) {
    auto self = shared_from_this();
    Response out;
    if (closed) {
      out.error = "closed";
      co_return out;
    }
    // A pooled connection the server has since closed fails at once: then one fresh attempt.
    const bool pooled = !idle.empty();
    out = co_await exchange_once(path, body, deadline, true);
    if (!out.error.empty() && !out.refused && pooled && !closed && left_until(deadline).count() > 0)
      out = co_await exchange_once(path, body, deadline, false);
    if (!out.error.empty()) current = (current + 1) % endpoints.size();  // next call tries another member
    co_return out;
  }

  asio::awaitable<Response> exchange_once(const char* path, const json::object& body, time_point deadline,
                                          bool allow_idle) {
    Response out;
    auto [s, why] = co_await open(deadline, allow_idle);
    if (!s) {
      out.error = why;
      co_return out;
    }
    auto exchange = [&, s = s]() -> asio::awaitable<Response> {
      Response r;
      const std::string text = request_text(where(), path, json::serialize(body));
      if (auto ec = co_await send_all(*s, text)) {
        r.error = where() + ": " + ec.message();
        co_return r;
      }
      beast::flat_buffer buf;
      http::response_parser<http::string_body> parser;
      parser.body_limit(kMaxResponse);
      parser.header_limit(16 << 10);
      runtime::error_code ec;
      co_await http::async_read(*s, buf, parser, asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        r.error = where() + ": " + ec.message();
        co_return r;
      }
      auto& res = parser.get();
      if (res.result() != http::status::ok) {
        r.error = where() + ": HTTP " + std::to_string(res.result_int()) + ": " + res.body().substr(0, 200);
        co_return r;
      }
      if (auto bad = parse_object(res.body(), r.body); !bad.empty()) {
        r.error = where() + ": " + bad;
        r.refused = true;
      }
      if (r.error.empty() && res.keep_alive() && buf.size() == 0 && idle.size() < 4 && !closed) idle.push_back(s);
      co_return r;
    };
    asio::steady_timer t(ex, left_until(deadline));
    auto r = co_await (exchange() || t.async_wait(asio::use_awaitable));
    if (r.index() == 1) {
      out.error = where() + ": no reply in time";
    } else {
      out = std::move(std::get<0>(r));
    }
    if (std::find(idle.begin(), idle.end(), s) == idle.end()) forget(s);
    co_return out;
  }

  // -- the operations ------------------------------------------------------------------------------
  json::object key_only(const std::string& key) const { return {{"key", base64_encode(key)}}; }

  json::object put_of(const std::string& key, const std::string& value) const {
    return {{"key", base64_encode(key)}, {"value", base64_encode(value)}, {"lease", lease}};
  }

  struct Current {
    bool found = false;
    std::string value;
    std::int64_t mod_revision = 0;
    std::int64_t revision = 0;  // of the store when read
  };

  // Reads a key; an empty string on success, else why not.
  std::string current_of(const Response& r, Current& c) const {
    c = Current{};
    if (const auto* h = object_field(r.body, "header")) c.revision = int_field(*h, "revision");
    const auto* kvs = array_field(r.body, "kvs");
    if (kvs == nullptr || kvs->empty()) return {};
    if (!(*kvs)[0].is_object()) return "range reply without a key-value object";
    const auto& kv = (*kvs)[0].as_object();
    if (!base64_decode(string_field(kv, "value"), c.value)) return "range reply with a value that is not base64";
    c.found = true;
    c.mod_revision = int_field(kv, "mod_revision");
    return {};
  }

  asio::awaitable<std::string> read(const std::string& key, time_point deadline, Current& c) {
    const json::object body = key_only(key);
    auto r = co_await call("/v3/kv/range", body, deadline);
    if (!r.error.empty()) co_return r.error;
    co_return current_of(r, c);
  }

  // Writes `value` if the key is still as read (mod_revision, or absent); `swapped` says whether it was.
  asio::awaitable<std::string> swap(const std::string& key, const Current& was, const std::string& value,
                                    time_point deadline, bool& swapped) {
    json::object cmp{{"key", base64_encode(key)}, {"result", "EQUAL"}};
    if (was.found) {
      cmp["target"] = "MOD";
      cmp["mod_revision"] = std::to_string(was.mod_revision);
    } else {
      cmp["target"] = "CREATE";
      cmp["create_revision"] = "0";
    }
    json::object txn{{"compare", json::array{cmp}},
                     {"success", json::array{json::object{{"request_put", put_of(key, value)}}}}};
    auto r = co_await call("/v3/kv/txn", txn, deadline);
    if (!r.error.empty()) co_return r.error;
    swapped = bool_field(r.body, "succeeded");
    co_return std::string{};
  }

  // The key's value, watching for it from the read's revision while it does not exist.
  asio::awaitable<std::pair<Status, std::string>> get_or_watch(const std::string& key, time_point deadline,
                                                               std::string& value) {
    Current c;
    if (auto why = co_await read(key, deadline, c); !why.empty()) co_return std::pair{Status::NOT_CONNECTED, why};
    if (c.found) {
      value = std::move(c.value);
      co_return std::pair{Status::SUCCESS, std::string{}};
    }
    co_return co_await watch(key, c.revision + 1, deadline, value);
  }

  asio::awaitable<std::pair<Status, std::string>> watch(const std::string& key, std::int64_t from, time_point deadline,
                                                        std::string& value) {
    auto self = shared_from_this();
    if (left_until(deadline).count() == 0) co_return std::pair{Status::TIMEOUT, "not set: " + key};
    auto [s, why] = co_await open(deadline);
    if (!s) co_return std::pair{Status::NOT_CONNECTED, why};
    auto stream = [&, s = s]() -> asio::awaitable<std::pair<Status, std::string>> {
      json::object create{{"key", base64_encode(key)}, {"start_revision", std::to_string(from)}};
      json::object body{{"create_request", create}};
      const std::string text = request_text(where(), "/v3/watch", json::serialize(body));
      if (auto ec = co_await send_all(*s, text))
        co_return std::pair{Status::NOT_CONNECTED, where() + ": " + ec.message()};
      beast::flat_buffer buf;
      http::response_parser<http::buffer_body> parser;
      parser.body_limit(boost::none);
      parser.header_limit(16 << 10);
      runtime::error_code ec;
      co_await http::async_read_header(*s, buf, parser, asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return std::pair{Status::NOT_CONNECTED, where() + ": " + ec.message()};
      if (parser.get().result() != http::status::ok)
        co_return std::pair{Status::NOT_CONNECTED,
                            where() + ": watch: HTTP " + std::to_string(parser.get().result_int())};
      json::parse_options po;
      po.max_depth = 32;
      json::stream_parser jp({}, po);
      JsonElementCount elements(kMaxWatchElements);
      std::size_t total = 0;
      char chunk[16384];
      while (!parser.is_done()) {
        parser.get().body().data = chunk;
        parser.get().body().size = sizeof chunk;
        co_await http::async_read_some(*s, buf, parser, asio::redirect_error(asio::use_awaitable, ec));
        if (ec == http::error::need_buffer) ec = {};
        if (ec) co_return std::pair{Status::NOT_CONNECTED, where() + ": watch stream: " + ec.message()};
        const std::size_t n = sizeof chunk - parser.get().body().size;
        total += n;
        if (total > kMaxResponse) co_return std::pair{Status::PROTOCOL_ERROR, where() + ": watch stream too long"};
        if (!elements.feed(std::string_view(chunk, n)))
          co_return std::pair{Status::PROTOCOL_ERROR, where() + ": watch stream holds too many JSON elements"};
        std::size_t at = 0;
        while (at < n) {
          runtime::error_code jec;
          at += jp.write_some(chunk + at, n - at, jec);
          if (jec) co_return std::pair{Status::PROTOCOL_ERROR, "malformed JSON in etcd's watch stream"};
          if (!jp.done()) continue;
          json::value v = jp.release();
          jp.reset();
          const json::object* result = v.is_object() ? object_field(v.as_object(), "result") : nullptr;
          if (result == nullptr) continue;
          if (bool_field(*result, "canceled"))
            co_return std::pair{Status::NOT_CONNECTED,
                                "etcd cancelled the watch: " + string_field(*result, "cancel_reason")};
          const auto* events = array_field(*result, "events");
          if (events == nullptr) continue;
          for (const auto& e : *events) {
            if (!e.is_object() || string_field(e.as_object(), "type") == "DELETE") continue;
            const auto* kv = object_field(e.as_object(), "kv");
            if (kv == nullptr || !base64_decode(string_field(*kv, "value"), value))
              co_return std::pair{Status::PROTOCOL_ERROR, "watch event without a base64 value"};
            co_return std::pair{Status::SUCCESS, std::string{}};
          }
        }
      }
      co_return std::pair{Status::NOT_CONNECTED, where() + ": watch stream ended"};
    };
    asio::steady_timer t(ex, left_until(deadline));
    auto r = co_await (stream() || t.async_wait(asio::use_awaitable));
    forget(s);  // a watch connection is never reused
    if (r.index() == 1) co_return std::pair{Status::TIMEOUT, "not set: " + key};
    co_return std::get<0>(r);
  }

  asio::awaitable<void> run(wire::Request rq, Done done) {
    auto self = shared_from_this();
    const bool waits = rq.op == wire::Op::get || rq.op == wire::Op::wait;
    const time_point deadline = runtime::deadline_after(waits ? rq.timeout : options.timeout);
    const std::string what = "store " + url + ": " + (rq.key.empty() && !rq.keys.empty() ? rq.keys.front() : rq.key);
    wire::Reply reply;
    Status status = Status::SUCCESS;
    std::string why;
    auto failed = [&](Status s, std::string w) {
      status = s;
      why = std::move(w);
    };
    switch (rq.op) {
      case wire::Op::set: {
        const json::object body = put_of(rq.key, rq.value);
        auto r = co_await call("/v3/kv/put", body, deadline);
        if (!r.error.empty()) failed(Status::NOT_CONNECTED, r.error);
        break;
      }
      case wire::Op::get: {
        auto [s, w] = co_await get_or_watch(rq.key, deadline, reply.value);
        if (s != Status::SUCCESS) failed(s, w);
        break;
      }
      case wire::Op::wait:
        for (const auto& k : rq.keys) {
          std::string ignored;
          auto [s, w] = co_await get_or_watch(k, deadline, ignored);
          if (s != Status::SUCCESS) {
            failed(s, w);
            break;
          }
        }
        break;
      case wire::Op::check:
        reply.flag = true;
        for (const auto& k : rq.keys) {
          Current c;
          if (auto w = co_await read(k, deadline, c); !w.empty()) {
            failed(Status::NOT_CONNECTED, w);
            break;
          }
          reply.flag = reply.flag && c.found;
        }
        break;
      case wire::Op::add:
      case wire::Op::compare_set:
        for (;;) {
          Current c;
          if (auto w = co_await read(rq.key, deadline, c); !w.empty()) {
            failed(Status::NOT_CONNECTED, w);
            break;
          }
          std::string next = rq.value;
          if (rq.op == wire::Op::add) {
            std::int64_t now = 0;
            if (c.found) {
              const auto [end, ec] = std::from_chars(c.value.data(), c.value.data() + c.value.size(), now);
              if (ec != std::errc{} || end != c.value.data() + c.value.size() || c.value.empty()) {
                failed(Status::INVALID_ARGUMENT, "add: key does not hold an integer");
                break;
              }
            }
            now += rq.delta;
            reply.number = now;
            next = std::to_string(now);
          } else if (!(c.found ? c.value == rq.expected : rq.expected.empty())) {
            reply.value = c.value;
            break;
          }
          bool swapped = false;
          if (auto w = co_await swap(rq.key, c, next, deadline, swapped); !w.empty()) {
            failed(Status::NOT_CONNECTED, w);
            break;
          }
          if (swapped) {
            reply.value = next;
            reply.flag = true;
            break;
          }
          if (left_until(deadline).count() == 0) {
            failed(Status::TIMEOUT, "contended past the deadline");
            break;
          }
        }
        break;
      case wire::Op::erase: {
        const json::object body = key_only(rq.key);
        auto r = co_await call("/v3/kv/deleterange", body, deadline);
        if (!r.error.empty()) {
          failed(Status::NOT_CONNECTED, r.error);
        } else {
          reply.flag = int_field(r.body, "deleted") > 0;
        }
        break;
      }
    }
    if (closed) failed(Status::CLOSED, "closed");
    if (status != Status::SUCCESS && status != Status::TIMEOUT && left_until(deadline).count() == 0)
      status = Status::TIMEOUT;
    std::exception_ptr e = status == Status::SUCCESS ? nullptr : store_error(status, what + ": " + why);
    runtime::complete_later(ex, std::move(done), e, std::move(reply));
  }

  asio::awaitable<void> keep_alive() {
    auto self = shared_from_this();
    const auto period =
        std::max<milliseconds>(std::chrono::duration_cast<milliseconds>(options.lease_ttl) / 3, milliseconds(500));
    while (!closed) {
      keepalive.expires_after(period);
      runtime::error_code ec;
      co_await keepalive.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      if (closed || ec == asio::error::operation_aborted) co_return;
      // Arguments of co_await calls are named locals here and below: GCC 12 mishandles some temporaries there.
      const json::object body{{"ID", lease}};
      const auto until = runtime::deadline_after(period);
      auto r = co_await call("/v3/lease/keepalive", body, until);
      const json::object* result = r.error.empty() ? object_field(r.body, "result") : nullptr;
      if (!r.error.empty()) {
        runtime::log().warn("store {}: lease keep-alive failed: {}", url, r.error);
      } else if (result == nullptr || int_field(*result, "TTL") <= 0) {
        runtime::log().error("store {}: lease {} expired; keys written from now on fail", url, lease);
      }
    }
  }

  void close_all() {
    if (closed) return;
    closed = true;
    keepalive.cancel();
    idle.clear();
    for (const auto& s : std::set<Socket>(live)) forget(s);
  }
};

EtcdStoreClient::EtcdStoreClient(runtime::loop_executor ex, std::string url,
                                 std::vector<std::pair<std::string, std::uint16_t>> endpoints,
                                 const StoreOptions& options)
    : impl_(std::make_shared<Impl>(ex, std::move(url), std::move(endpoints), options)) {}

EtcdStoreClient::~EtcdStoreClient() = default;

asio::awaitable<std::exception_ptr> EtcdStoreClient::connect(milliseconds timeout) {
  auto impl = impl_;
  const auto deadline = runtime::deadline_after(timeout);
  milliseconds pause{20};
  for (;;) {
    const auto ttl = std::max<std::int64_t>(1, impl->options.lease_ttl.count());
    const json::object body{{"TTL", std::to_string(ttl)}};
    auto r = co_await impl->call("/v3/lease/grant", body, deadline);
    if (r.error.empty()) {
      const std::int64_t id = int_field(r.body, "ID");
      if (id == 0)
        co_return store_error(Status::PROTOCOL_ERROR,
                              "store " + impl->url + ": etcd granted no lease: " + string_field(r.body, "error"));
      impl->lease = std::to_string(id);
      local_address_ = impl->local_address;
      asio::co_spawn(impl->ex, impl->keep_alive(), asio::detached);
      co_return nullptr;
    }
    if (r.refused) co_return store_error(Status::PROTOCOL_ERROR, "store " + impl->url + ": " + r.error);
    if (left_until(deadline).count() == 0)
      co_return store_error(Status::NOT_CONNECTED, "store " + impl->url + " unreachable for " +
                                                       std::to_string(timeout.count()) + " ms (last: " + r.error + ")");
    asio::steady_timer wait(impl->ex, std::min(pause, left_until(deadline)));
    runtime::error_code ignored;
    co_await wait.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
    pause = std::min(pause * 2, milliseconds(500));
  }
}

void EtcdStoreClient::start(wire::Request request, Done done) {
  asio::co_spawn(impl_->ex, impl_->run(std::move(request), std::move(done)), asio::detached);
}

void EtcdStoreClient::close() { impl_->close_all(); }

}  // namespace hmc::detail
