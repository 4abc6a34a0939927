#pragma once
// The etcd v3 backend (etcd://host:port[,host:port...]) over etcd's HTTP/JSON gateway (/v3/...):
// HTTP/1.1 requests written by hand (sent with MSG_NOSIGNAL), responses parsed by Boost.Beast,
// JSON by Boost.JSON. Every key this client writes carries its lease, kept alive every ttl/3, so a
// dead client's keys expire. get/wait watch the key from the revision of the failed read; add and
// compare_set are read-then-transaction loops on mod_revision. Loop thread only.
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hmc/store/store.hpp"
#include "store/store_backend.hpp"

namespace hmc::detail {

class EtcdStoreClient final : public StoreBackend, public std::enable_shared_from_this<EtcdStoreClient> {
 public:
  EtcdStoreClient(runtime::loop_executor ex, std::string url,
                  std::vector<std::pair<std::string, std::uint16_t>> endpoints, const StoreOptions& options);
  ~EtcdStoreClient() override;

  // Reaches an endpoint (retrying until timeout), grants the lease and starts its keep-alive.
  runtime::asio::awaitable<std::exception_ptr> connect(std::chrono::milliseconds timeout);

  void start(store_wire::Request request, Done done) override;
  void close() override;
  std::string local_address() const override { return local_address_; }

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
  std::string local_address_;
};

}  // namespace hmc::detail
