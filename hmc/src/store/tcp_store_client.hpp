#pragma once
// The client of the embedded store (tcp://): one authenticated connection, requests pipelined by id,
// replies matched as they come (a parked get does not hold up later requests). Loop thread only.
#include <chrono>
#include <map>
#include <memory>
#include <optional>

#include "hmc/store/store.hpp"
#include "security/auth.hpp"
#include "store/store_backend.hpp"
#include "store/store_stream.hpp"

namespace hmc::detail {

class TcpStoreClient final : public StoreBackend, public std::enable_shared_from_this<TcpStoreClient> {
 public:
  TcpStoreClient(runtime::loop_executor ex, std::string url, std::string host, std::uint16_t port,
                 const StoreOptions& options);

  // Connects and authenticates, retrying refused connections until `timeout`; completes with null
  // or a typed error naming the URL.
  runtime::asio::awaitable<std::exception_ptr> connect(std::chrono::milliseconds timeout);

  void start(store_wire::Request request, Done done) override;
  void close() override;
  std::string local_address() const override { return local_address_; }

 private:
  struct Pending {
    std::optional<Done> done;  // constructed once, never assigned (Asio 1.26 any_completion_handler)
    std::optional<runtime::asio::steady_timer> timer;
    std::string what;
    bool waits = false;  // a blocking get or wait: the store may well end while it waits
  };
  runtime::asio::awaitable<std::string> secure_handshake(bool& auth_refused);
  runtime::asio::awaitable<std::string> handshake(bool& auth_refused);
  runtime::asio::awaitable<void> read_loop();
  void complete(std::uint32_t id, std::exception_ptr e, store_wire::Reply r);
  void fail_all(Status s, const std::string& why);

  runtime::loop_executor ex_;
  std::string url_, host_;
  std::uint16_t port_;
  StoreOptions options_;
  AuthKey key_;
  std::shared_ptr<runtime::asio::ssl::context> tls_;  // null: in clear
  store_wire::Limits limits_;
  std::shared_ptr<StoreStream> stream_;
  std::map<std::uint32_t, std::unique_ptr<Pending>> pending_;
  std::uint32_t next_id_ = 1;
  std::string local_address_;
  std::string broken_;  // why the connection is gone; empty while it works
};

}  // namespace hmc::detail
