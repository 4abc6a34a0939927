#pragma once
// The embedded store (tcp://host:port): an in-memory key-value map served on an event loop to
// hmc::Store clients, in clear or over TLS. Every connection proves the shared key first (mutual HMAC-SHA256
// challenge-response, the key the control channel uses); every byte after that is still treated as
// hostile: bounded frames, keys, values, waits, connections and memory, deadlines on handshakes and
// on frames once their header arrived. A misbehaving connection is closed; others are untouched.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "hmc/runtime/async_op.hpp"
#include "hmc/runtime/event_loop.hpp"
#include "hmc/tls_options.hpp"

namespace hmc {

namespace detail {
class StoreServerImpl;
}

struct StoreServerOptions {
  std::string auth_key;  // empty: $HMC_AUTH_KEY, then the key file
  bool authenticate = true;
  std::size_t max_connections = 4096;  // more are closed at once (a world of 1024 ranks needs 1024)
  // Connections still in their handshake, in all and from one source address. A newcomer that finds
  // no room evicts the oldest (of its source when that source is at its cap); the client retries.
  std::size_t max_handshakes = 64;
  std::size_t max_handshakes_per_source = 16;
  std::size_t max_keys = std::size_t{1} << 20;
  std::size_t max_bytes = std::size_t{1} << 30;  // keys + values held
  std::size_t max_value_size = std::size_t{16} << 20;
  std::size_t max_waits_per_connection = 1024;  // get/wait requests parked at once
  // Reply bytes waiting for clients that do not read, over all connections: past it, a connection
  // that already has replies waiting is closed instead of queueing more (each has its own bound too).
  std::size_t max_queued_replies = std::size_t{256} << 20;
  std::chrono::milliseconds handshake_timeout{5000};
  std::chrono::milliseconds frame_timeout{30000};  // a frame's payload must arrive within this
  // TLS under the key handshake (both sides present a certificate); unset: the store speaks in clear.
  TlsOptions tls;
};

class StoreServer {
 public:
  // Serves on its own event loop thread.
  explicit StoreServer(StoreServerOptions options = {});
  // Serves on `loop` (e.g. a Session's), which must outlive the server; its blocking calls wait
  // through the loop (driving it when nobody else does).
  StoreServer(runtime::EventLoop& loop, StoreServerOptions options);
  ~StoreServer();  // close()
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  // Starts accepting on host:port (0: a free port); returns the bound port. InvalidConfigError
  // naming the address when it cannot be bound (e.g. in use).
  std::uint16_t listen(const std::string& host, std::uint16_t port);
  // Stops accepting and closes every connection; parked requests are dropped. Idempotent.
  void close();

  std::size_t connections() const;
  std::size_t keys() const;

 private:
  std::unique_ptr<runtime::EventLoop> own_loop_;
  runtime::EventLoop* loop_;
  std::shared_ptr<detail::StoreServerImpl> impl_;
};

}  // namespace hmc
