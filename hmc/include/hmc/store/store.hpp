#pragma once
// A key-value store that ranks bootstrap through: set, get (waits for the key), wait, add (an atomic
// counter), compare_set, erase, each with a timeout and typed errors. Every key lives under the
// store's job id, so jobs sharing one store never collide. Backends by URL:
//   tcp://host:port                 the embedded store (hmc::StoreServer), mutual HMAC authentication
//   etcd://host:port[,host:port...] etcd v3 over its HTTP/JSON gateway; keys carry this client's lease
//   env://                          tcp://MASTER_ADDR:MASTER_PORT (torchrun's variables)
// Values are binary-safe std::strings. Async operations take an Asio completion token and complete
// with a std::exception_ptr first (null on success); blocking ones wait at most their timeout.
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "hmc/runtime/async_op.hpp"
#include "hmc/runtime/event_loop.hpp"
#include "hmc/tls_options.hpp"

namespace hmc {

namespace detail {
class StoreState;
}

struct StoreOptions {
  std::string job_id;                        // key namespace; empty: $HMC_JOB_ID, else $TORCHELASTIC_RUN_ID, else "hmc"
  std::chrono::milliseconds timeout{30000};  // connecting (retried until then) and operations without their own
  std::string auth_key;                      // empty: $HMC_AUTH_KEY, then the key file (as the control channel)
  bool authenticate = true;                  // tcp://: mutual HMAC-SHA256 challenge-response before any request
  std::chrono::seconds lease_ttl{10};        // etcd://: a dead client's keys expire after this
  TlsOptions tls;                            // tcp://: TLS under the key handshake; unset: in clear
};

// The parts of a store URL (parse_store_url); env:// resolves to its tcp:// address.
struct StoreAddress {
  std::string scheme;                                            // "tcp" or "etcd"
  std::vector<std::pair<std::string, std::uint16_t>> endpoints;  // host, port (etcd: one or more)
  std::string url;                                               // as the user wrote it, for messages
};

// InvalidConfigError (with the URL) for anything that is not one of the forms above.
StoreAddress parse_store_url(const std::string& url);

class Store {
 public:
  // Connects, retrying until options.timeout while the store is not up yet (ranks start in any
  // order): NotConnectedError naming the URL when it stays unreachable, AuthenticationError when
  // either side lacks the shared key. The first form runs its own event loop; the second runs on
  // `loop` (e.g. a Session's), which must outlive the store, and its blocking calls wait through
  // that loop (driving it when nobody else does); none may be made from a handler of that loop.
  explicit Store(const std::string& url, StoreOptions options = {});
  Store(const std::string& url, StoreOptions options, runtime::EventLoop& loop);
  ~Store();  // close()
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::string& url() const noexcept;
  const std::string& job_id() const noexcept;
  const StoreOptions& options() const noexcept;
  runtime::loop_executor executor() const noexcept;
  // This host's address on the connection to the store: an address peers can likely reach.
  std::string local_address() const;

  template <class Token>
  auto async_set(std::string key, std::string value, Token&& token) {
    return start<void(std::exception_ptr)>(op_set, {std::move(key)}, std::move(value), {}, 0, {},
                                           std::forward<Token>(token));
  }
  // Waits up to `timeout` for the key to exist, then completes with its value.
  template <class Token>
  auto async_get(std::string key, std::chrono::milliseconds timeout, Token&& token) {
    return start<void(std::exception_ptr, std::string)>(op_get, {std::move(key)}, {}, {}, 0, timeout,
                                                        std::forward<Token>(token));
  }
  template <class Token>
  auto async_wait(std::vector<std::string> keys, std::chrono::milliseconds timeout, Token&& token) {
    return start<void(std::exception_ptr)>(op_wait, std::move(keys), {}, {}, 0, timeout, std::forward<Token>(token));
  }
  // Adds delta to the integer stored at key (a missing key counts as 0); completes with the sum.
  template <class Token>
  auto async_add(std::string key, std::int64_t delta, Token&& token) {
    return start<void(std::exception_ptr, std::int64_t)>(op_add, {std::move(key)}, {}, {}, delta, {},
                                                         std::forward<Token>(token));
  }
  // Stores desired when the current value equals expected ("" matches a missing key); completes
  // with the value stored afterwards (torch.distributed.Store semantics).
  template <class Token>
  auto async_compare_set(std::string key, std::string expected, std::string desired, Token&& token) {
    return start<void(std::exception_ptr, std::string)>(op_compare_set, {std::move(key)}, std::move(desired),
                                                        std::move(expected), 0, {}, std::forward<Token>(token));
  }
  // Completes with whether the key existed.
  template <class Token>
  auto async_erase(std::string key, Token&& token) {
    return start<void(std::exception_ptr, bool)>(op_erase, {std::move(key)}, {}, {}, 0, {}, std::forward<Token>(token));
  }
  // Whether every key exists now (no wait).
  template <class Token>
  auto async_check(std::vector<std::string> keys, Token&& token) {
    return start<void(std::exception_ptr, bool)>(op_check, std::move(keys), {}, {}, 0, {}, std::forward<Token>(token));
  }

  // Blocking forms; timeouts default to options().timeout. InvalidArgumentError on the store's loop thread.
  void set(const std::string& key, const std::string& value);
  std::string get(const std::string& key);
  std::string get(const std::string& key, std::chrono::milliseconds timeout);
  void wait(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  std::int64_t add(const std::string& key, std::int64_t delta);
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired);
  bool erase(const std::string& key);
  bool check(const std::vector<std::string>& keys);

  // Fails every pending and later operation with ClosedError. Idempotent.
  void close();

 private:
  enum OpCode : int { op_set = 1, op_get, op_wait, op_add, op_compare_set, op_erase, op_check };
  using any_result = runtime::asio::any_completion_handler<void(std::exception_ptr, std::string, std::int64_t, bool)>;

  template <class Signature, class Token>
  auto start(OpCode op, std::vector<std::string> keys, std::string value, std::string expected, std::int64_t delta,
             std::chrono::milliseconds timeout, Token&& token) {
    return runtime::async_on_loop<Signature>(
        executor(), std::forward<Token>(token),
        [state = state_, op, keys = std::move(keys), value = std::move(value), expected = std::move(expected), delta,
         timeout](runtime::asio::any_completion_handler<Signature> h) mutable {
          start_on_loop(state, op, std::move(keys), std::move(value), std::move(expected), delta, timeout,
                        adapt(std::move(h)));
        });
  }
  // One internal result shape -> the signature the caller asked for, run on the handler's executor.
  template <class Signature>
  static any_result adapt(runtime::asio::any_completion_handler<Signature> h) {
    return [h = std::move(h)](std::exception_ptr e, std::string value, std::int64_t number, bool flag) mutable {
      auto ex = runtime::asio::get_associated_executor(h);
      if constexpr (std::is_same_v<Signature, void(std::exception_ptr)>) {
        runtime::asio::dispatch(ex, runtime::asio::append(std::move(h), e));
      } else if constexpr (std::is_same_v<Signature, void(std::exception_ptr, std::string)>) {
        runtime::asio::dispatch(ex, runtime::asio::append(std::move(h), e, std::move(value)));
      } else if constexpr (std::is_same_v<Signature, void(std::exception_ptr, std::int64_t)>) {
        runtime::asio::dispatch(ex, runtime::asio::append(std::move(h), e, number));
      } else {
        runtime::asio::dispatch(ex, runtime::asio::append(std::move(h), e, flag));
      }
    };
  }
  static void start_on_loop(const std::shared_ptr<detail::StoreState>& state, OpCode op, std::vector<std::string> keys,
                            std::string value, std::string expected, std::int64_t delta,
                            std::chrono::milliseconds timeout, any_result done);
  template <class T, class F>
  T blocking(const char* what, std::chrono::milliseconds timeout, F start_op);
  void open(const std::string& url, StoreOptions options, runtime::EventLoop* loop);

  std::unique_ptr<runtime::EventLoop> own_loop_;  // before state_: handlers it still holds die with it
  runtime::EventLoop* loop_ = nullptr;            // own_loop_, or the one given
  std::shared_ptr<detail::StoreState> state_;
};

}  // namespace hmc
