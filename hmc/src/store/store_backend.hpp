#pragma once
// One way a Store reaches its data (the embedded tcp store, etcd). Loop thread only.
#include <exception>
#include <string>

#include "hmc/error.hpp"
#include "hmc/runtime/asio.hpp"
#include "store/store_wire.hpp"

namespace hmc::detail {

class StoreBackend {
 public:
  // A failure (transport, timeout, or the store's own refusal) is a typed hmc::Error whose text
  // names the store's URL.
  using Done = runtime::asio::any_completion_handler<void(std::exception_ptr, store_wire::Reply)>;

  virtual ~StoreBackend() = default;
  // Keys arrive already namespaced. Completes `done` exactly once, posted to the loop.
  virtual void start(store_wire::Request request, Done done) = 0;
  // Fails what is pending with ClosedError and releases the connection(s).
  virtual void close() = 0;
  // This host's address on the connection to the store.
  virtual std::string local_address() const = 0;
};

// The typed exception for a status (through make_error, the one conversion point).
inline std::exception_ptr store_error(Status s, const std::string& what) {
  return make_error(make_error_code(s), what);
}

}  // namespace hmc::detail
