#pragma once
// A world of ranks over Sessions: bootstrap through a store (rank, size, addresses), connections
// made on first use, and collectives on one-sided transfers between the ranks' session buffers.
//
// Start-up costs each rank O(1) store requests (rank counter, its address, one join counter) and
// the store O(size); a rank fetches a peer's address only when it first talks to it. Collectives
// run one at a time per World, in the order they were submitted, on the Session's loop; every rank
// must call the same collectives in the same order. They own the Session's control messages: do
// not ctrl_send/ctrl_recv on session() while collectives are in use. Any failure (a lost or silent
// peer, a timeout, a protocol error) is reported to every rank the failing one talks to and makes
// the World unusable: later calls fail with the same error (PeerLostError naming a dead rank).
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hmc/session.hpp"
#include "hmc/store/store.hpp"
#include "hmc/world/collective.hpp"

namespace hmc {

namespace detail {
class WorldImpl;
}

class StoreServer;

struct WorldOptions {
  // A dedicated loop thread unless told otherwise, so that a rank serves its peers' steps whether or
  // not it is inside a call.
  WorldOptions() { session.progress_thread = ProgressThread::own; }

  SessionOptions session;                    // each rank's Session; buffer_size bounds a collective round
  StoreOptions store;                        // job id, connect timeout of the store; its key: store.auth_key,
                                             // else session.auth_key; authenticate=false on either is for both
  std::optional<bool> start_store;           // host the embedded store (tcp:// and env:// only); default:
                                             // rank 0 when ranks are explicit, else whoever binds the port first
  std::string local_ip;                      // the address peers reach this rank at; empty: the local address
                                             // of the connection to the store
  bool full_mesh = false;                    // connect every pair during start-up instead of on first use
  std::chrono::milliseconds timeout{30000};  // collectives called with timeout 0
};

// Where a rank's Session listens (published through the store, or exchanged by the caller).
struct PeerAddress {
  std::string ip;
  std::uint16_t ctrl_port = 0;
};

class World {
 public:
  // Joins the world at store_url (tcp://, etcd://, env://). size 0 and rank nullopt take WORLD_SIZE
  // and RANK for env://; otherwise a missing rank is assigned by a store counter. Returns once all
  // `size` ranks joined (TimeoutError after options.store.timeout, naming how many did).
  World(const std::string& store_url, std::uint32_t size, std::optional<std::uint32_t> rank = std::nullopt,
        WorldOptions options = {});
  // A world without an HMC store (the caller exchanges addresses itself, e.g. through a
  // torch.distributed store): publish address(), then join() with every rank's.
  World(std::uint32_t rank, std::uint32_t size, WorldOptions options = {});
  ~World();  // close()
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  std::uint32_t rank() const noexcept;
  std::uint32_t size() const noexcept;
  Session& session() noexcept;
  // The store (nullptr for a world without one).
  Store* store() noexcept;
  PeerAddress address() const;
  // Completes the store-less form: directory[r] is rank r's address().
  void join(std::vector<PeerAddress> directory);

  // Makes `peer` a target of session().put/get now (the higher rank of a pair always dials; a
  // lower rank asks the peer to through the store). Collectives connect what they need themselves.
  void connect(std::uint32_t peer, std::chrono::milliseconds timeout = {});
  // Ranks this one is connected to.
  std::vector<std::uint32_t> connected() const;

  // -- collectives: async (any completion token), then blocking. timeout 0: options().timeout ------
  template <class Token>
  auto async_barrier(std::chrono::milliseconds timeout, Token&& token) {
    detail::CollectiveCall c;
    c.kind = detail::CollectiveCall::Kind::barrier;
    c.timeout = timeout;
    return start<void(std::exception_ptr)>(std::move(c), std::forward<Token>(token));
  }
  // Every rank gets root's `data` (the others' argument is ignored).
  template <class Token>
  auto async_broadcast(std::vector<std::byte> data, std::uint32_t root, std::chrono::milliseconds timeout,
                       Token&& token) {
    detail::CollectiveCall c;
    c.kind = detail::CollectiveCall::Kind::broadcast;
    c.data = std::move(data);
    c.root = root;
    c.timeout = timeout;
    return start<void(std::exception_ptr, std::vector<std::byte>)>(std::move(c), std::forward<Token>(token));
  }
  // Equal sizes: out[r * in.size(), ...) = rank r's in. InvalidArgumentError when sizes differ.
  template <class Token>
  auto async_all_gather(std::span<const std::byte> in, std::span<std::byte> out, std::chrono::milliseconds timeout,
                        Token&& token) {
    detail::CollectiveCall c;
    c.kind = detail::CollectiveCall::Kind::all_gather;
    c.in = in;
    c.out = out;
    c.timeout = timeout;
    return start<void(std::exception_ptr)>(std::move(c), std::forward<Token>(token));
  }
  // Any sizes: block r is rank r's in.
  template <class Token>
  auto async_all_gather_v(std::span<const std::byte> in, std::chrono::milliseconds timeout, Token&& token) {
    detail::CollectiveCall c;
    c.kind = detail::CollectiveCall::Kind::all_gather_v;
    c.in = in;
    c.timeout = timeout;
    return start<void(std::exception_ptr, Blocks)>(std::move(c), std::forward<Token>(token));
  }
  // root gets block r = rank r's in; the others get no blocks.
  template <class Token>
  auto async_gather(std::span<const std::byte> in, std::uint32_t root, std::chrono::milliseconds timeout,
                    Token&& token) {
    detail::CollectiveCall c;
    c.kind = detail::CollectiveCall::Kind::gather;
    c.in = in;
    c.root = root;
    c.timeout = timeout;
    return start<void(std::exception_ptr, Blocks)>(std::move(c), std::forward<Token>(token));
  }
  // Rank r gets root's blocks[r] (blocks has size() entries on the root, is ignored elsewhere).
  template <class Token>
  auto async_scatter(std::vector<std::span<const std::byte>> blocks, std::uint32_t root,
                     std::chrono::milliseconds timeout, Token&& token) {
    detail::CollectiveCall c;
    c.kind = detail::CollectiveCall::Kind::scatter;
    c.blocks = std::move(blocks);
    c.root = root;
    c.timeout = timeout;
    return start<void(std::exception_ptr, std::vector<std::byte>)>(std::move(c), std::forward<Token>(token));
  }
  // Equal blocks: in and out hold size() blocks of B bytes; out block s = rank s's in block rank().
  template <class Token>
  auto async_all_to_all(std::span<const std::byte> in, std::span<std::byte> out, std::chrono::milliseconds timeout,
                        Token&& token) {
    detail::CollectiveCall c;
    c.kind = detail::CollectiveCall::Kind::all_to_all;
    c.in = in;
    c.out = out;
    c.timeout = timeout;
    return start<void(std::exception_ptr)>(std::move(c), std::forward<Token>(token));
  }
  // blocks[d] goes to rank d; result block s came from rank s. Any sizes per pair.
  template <class Token>
  auto async_all_to_all_v(std::vector<std::span<const std::byte>> blocks, std::chrono::milliseconds timeout,
                          Token&& token) {
    detail::CollectiveCall c;
    c.kind = detail::CollectiveCall::Kind::all_to_all_v;
    c.blocks = std::move(blocks);
    c.timeout = timeout;
    return start<void(std::exception_ptr, Blocks)>(std::move(c), std::forward<Token>(token));
  }
  // Element-wise reduction of every rank's `in` (same type and length everywhere) into `out` (may be in).
  template <class Token>
  auto async_all_reduce(std::span<const std::byte> in, std::span<std::byte> out, DataType type, ReduceOp op,
                        std::chrono::milliseconds timeout, Token&& token) {
    detail::CollectiveCall c;
    c.kind = detail::CollectiveCall::Kind::all_reduce;
    c.in = in;
    c.out = out;
    c.dtype = type;
    c.op = op;
    c.timeout = timeout;
    return start<void(std::exception_ptr)>(std::move(c), std::forward<Token>(token));
  }

  void barrier(std::chrono::milliseconds timeout = {});
  std::vector<std::byte> broadcast(std::vector<std::byte> data, std::uint32_t root,
                                   std::chrono::milliseconds timeout = {});
  void all_gather(std::span<const std::byte> in, std::span<std::byte> out, std::chrono::milliseconds timeout = {});
  Blocks all_gather_v(std::span<const std::byte> in, std::chrono::milliseconds timeout = {});
  Blocks gather(std::span<const std::byte> in, std::uint32_t root, std::chrono::milliseconds timeout = {});
  std::vector<std::byte> scatter(std::vector<std::span<const std::byte>> blocks, std::uint32_t root,
                                 std::chrono::milliseconds timeout = {});
  void all_to_all(std::span<const std::byte> in, std::span<std::byte> out, std::chrono::milliseconds timeout = {});
  Blocks all_to_all_v(std::vector<std::span<const std::byte>> blocks, std::chrono::milliseconds timeout = {});
  void all_reduce(std::span<const std::byte> in, std::span<std::byte> out, DataType type, ReduceOp op,
                  std::chrono::milliseconds timeout = {});
  template <class T>
  void all_reduce(std::span<const T> in, std::span<T> out, ReduceOp op, std::chrono::milliseconds timeout = {}) {
    all_reduce(std::as_bytes(in), std::as_writable_bytes(out), data_type_of<T>(), op, timeout);
  }

  // Fails collectives in flight with ClosedError, closes the store, its server and the Session.
  void close();

 private:
  using any_result = runtime::asio::any_completion_handler<void(std::exception_ptr, detail::CollectiveResult)>;

  template <class Signature, class Token>
  auto start(detail::CollectiveCall call, Token&& token) {
    return runtime::async_on_loop<Signature>(
        session_->executor(), std::forward<Token>(token),
        [impl = impl_, call = std::move(call)](runtime::asio::any_completion_handler<Signature> h) mutable {
          submit(impl, std::move(call), adapt(std::move(h)));
        });
  }
  template <class Signature>
  static any_result adapt(runtime::asio::any_completion_handler<Signature> h) {
    return [h = std::move(h)](std::exception_ptr e, detail::CollectiveResult r) mutable {
      auto ex = runtime::asio::get_associated_executor(h);
      if constexpr (std::is_same_v<Signature, void(std::exception_ptr)>) {
        runtime::asio::dispatch(ex, runtime::asio::append(std::move(h), e));
      } else if constexpr (std::is_same_v<Signature, void(std::exception_ptr, detail::CollectiveResult)>) {
        runtime::asio::dispatch(ex, runtime::asio::append(std::move(h), e, std::move(r)));
      } else if constexpr (std::is_same_v<Signature, void(std::exception_ptr, Blocks)>) {
        runtime::asio::dispatch(ex, runtime::asio::append(std::move(h), e, std::move(r.blocks)));
      } else {
        runtime::asio::dispatch(ex, runtime::asio::append(std::move(h), e, std::move(r.bytes)));
      }
    };
  }
  static void submit(const std::shared_ptr<detail::WorldImpl>& impl, detail::CollectiveCall call, any_result done);
  // The blocking form of a collective: `start(use_future)` is its async_* call (world.cpp).
  template <class Start>
  auto block_on(detail::CollectiveCall::Kind kind, std::chrono::milliseconds timeout, Start start);
  void start_session(std::uint32_t rank, std::uint32_t size, const WorldOptions& options);
  void connect_all();
  void run_connect(const std::vector<std::uint32_t>& peers, std::chrono::steady_clock::time_point deadline, bool ring);

  std::unique_ptr<Session> session_;
  std::unique_ptr<StoreServer> store_server_;
  std::unique_ptr<Store> store_;
  std::shared_ptr<detail::WorldImpl> impl_;
};

}  // namespace hmc
