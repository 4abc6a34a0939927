#pragma once
// memfabric's TransferEngine over a Session: engines join through a store under a unique id,
// register memory, and write to / read from a peer's registered memory by the peer's virtual
// address. Engines come and go (no world size); connections are made on first use.
//
// The Session can only target a peer's session buffer, so a transfer is served by the peer: the
// initiator stages the bytes in its own session buffer (write) or offers room there (read) and
// sends a request; the peer checks that [address, address + length) lies inside memory it
// registered, then gets the bytes straight into that memory (or puts them from it) and answers.
// Nothing a peer sends can reach memory the engine did not register.
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "hmc/session.hpp"
#include "hmc/store/store.hpp"

namespace hmc {

namespace detail {
class TransferEngineImpl;
}

struct TransferEngineOptions {
  // A dedicated loop thread unless told otherwise, so that the engine serves its peers' transfers
  // whether or not it is inside a call.
  TransferEngineOptions() { session.progress_thread = ProgressThread::own; }

  SessionOptions session;                    // buffer_size: staging for transfers in flight
  StoreOptions store;                        // its key: store.auth_key, else session.auth_key (as WorldOptions)
  std::string local_ip;                      // empty: the local address of the connection to the store
  std::chrono::milliseconds timeout{30000};  // of each transfer
};

// One piece of a batch: `length` bytes between local memory and the peer's address.
struct TransferPiece {
  void* local = nullptr;
  std::uint64_t peer_address = 0;
  std::size_t length = 0;
};

class TransferEngine {
 public:
  // Joins the engines of the store's job as `unique_id` (memfabric uses "ip:port"; any string
  // without '/' that no other engine uses). InvalidConfigError when the id is taken.
  TransferEngine(const std::string& store_url, const std::string& unique_id, TransferEngineOptions options = {});
  ~TransferEngine();  // close()
  TransferEngine(const TransferEngine&) = delete;
  TransferEngine& operator=(const TransferEngine&) = delete;

  const std::string& unique_id() const noexcept;
  std::uint32_t rank() const noexcept;  // this engine's number in the job, from the store
  std::uint16_t rpc_port() const;       // the control port peers reach it at
  Session& session() noexcept;

  // Makes [address, address + length) a target for peers (published through the store).
  void register_memory(void* address, std::size_t length);
  // NotFoundError when address does not start a registered region.
  void unregister_memory(void* address);

  // Completes once the bytes are in the peer's memory (write) or in `local` (read). OutOfRangeError
  // when the peer has not registered the whole range; local memory must stay valid until then.
  template <class Token>
  auto async_write(std::string peer, const void* local, std::uint64_t peer_address, std::size_t length, Token&& token) {
    return start(true, std::move(peer), {TransferPiece{const_cast<void*>(local), peer_address, length}},
                 std::forward<Token>(token));
  }
  template <class Token>
  auto async_read(std::string peer, void* local, std::uint64_t peer_address, std::size_t length, Token&& token) {
    return start(false, std::move(peer), {TransferPiece{local, peer_address, length}}, std::forward<Token>(token));
  }
  template <class Token>
  auto async_write_batch(std::string peer, std::vector<TransferPiece> pieces, Token&& token) {
    return start(true, std::move(peer), std::move(pieces), std::forward<Token>(token));
  }

  void write(const std::string& peer, const void* local, std::uint64_t peer_address, std::size_t length);
  void read(const std::string& peer, void* local, std::uint64_t peer_address, std::size_t length);
  void write_batch(const std::string& peer, std::vector<TransferPiece> pieces);

  void close();

 private:
  using handler = runtime::asio::any_completion_handler<void(std::exception_ptr)>;
  template <class Token>
  auto start(bool is_write, std::string peer, std::vector<TransferPiece> pieces, Token&& token) {
    return runtime::async_on_loop<void(std::exception_ptr)>(
        session_->executor(), std::forward<Token>(token),
        [impl = impl_, is_write, peer = std::move(peer), pieces = std::move(pieces)](handler h) mutable {
          submit(impl, is_write, std::move(peer), std::move(pieces), std::move(h));
        });
  }
  static void submit(const std::shared_ptr<detail::TransferEngineImpl>& impl, bool is_write, std::string peer,
                     std::vector<TransferPiece> pieces, handler h);
  void blocking(bool is_write, const std::string& peer, std::vector<TransferPiece> pieces);

  std::unique_ptr<Session> session_;
  std::unique_ptr<Store> store_;
  std::shared_ptr<detail::TransferEngineImpl> impl_;
};

}  // namespace hmc
