#pragma once
// The World's engine: connections (a connector thread around the Session's blocking connect;
// world_impl.cpp), the collective queue (collective_queue.cpp) and the collectives themselves
// (collectives.cpp), on the Session's loop.
//
// Buffer layout and the rule that keeps it safe: the session buffer is two halves; collective round
// s uses half s % 2. A rank publishes what others read in its own half (they get() it after its
// notice) and stages what it gets in the same half. Every round has barrier semantics (no rank
// leaves it before every rank entered it) and every rank finishes its own reads and writes of a
// round before leaving it; so when a rank enters round s, every rank has left round s - 2, the last
// user of that half. Rooted rounds get barrier semantics from a ready (scatter, broadcast) or a
// release (gather) message.
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "hmc/world/world.hpp"
#include "world/connector.hpp"
#include "world/world_message.hpp"

namespace hmc::detail {

namespace asio = runtime::asio;
using time_point = std::chrono::steady_clock::time_point;

class Batch;

class WorldImpl : public std::enable_shared_from_this<WorldImpl> {
 public:
  WorldImpl(Session& session, Store* store, std::uint32_t rank, std::uint32_t size, WorldOptions options);
  ~WorldImpl();

  // -- connections -----------------------------------------------------------------------------
  // Starts the connector (and, with a store, the doorbell and abort watchers).
  void start();
  asio::awaitable<void> ensure(const std::vector<std::uint32_t>& wanted, time_point deadline);

  // -- collectives -----------------------------------------------------------------------------
  void submit(CollectiveCall call, asio::any_completion_handler<void(std::exception_ptr, CollectiveResult)> done);
  // Fails everything queued and later with ClosedError (on the loop).
  void shutdown();
  // A collective is running (loop thread).
  bool busy() const noexcept { return running_; }

  Session& session;
  Store* const store;
  const std::uint32_t rank;
  const std::uint32_t size;
  const WorldOptions options;
  const runtime::loop_executor ex;

  const std::shared_ptr<Connector> connector;
  // Loop thread.
  std::set<std::uint32_t> connected;

 private:
  struct Job {  // move-constructed only (Asio 1.26's any_completion_handler must never be assigned)
    CollectiveCall call;
    asio::any_completion_handler<void(std::exception_ptr, CollectiveResult)> done;
  };

  struct ConnectWait {
    explicit ConnectWait(runtime::loop_executor e) : wake(e) {}
    asio::steady_timer wake;
    bool finished = false;
    std::optional<Fault> outcome;
  };

  asio::awaitable<void> run_queue();
  asio::awaitable<void> watch_aborts();
  asio::awaitable<void> run(CollectiveCall& call, CollectiveResult& result);

  asio::awaitable<void> barrier(time_point deadline);
  asio::awaitable<void> broadcast(CollectiveCall& c, CollectiveResult& r, time_point deadline);
  asio::awaitable<void> exchange(CollectiveCall& c, CollectiveResult& r, time_point deadline);
  asio::awaitable<void> gather(CollectiveCall& c, CollectiveResult& r, time_point deadline);
  asio::awaitable<void> scatter(CollectiveCall& c, CollectiveResult& r, time_point deadline);
  asio::awaitable<void> all_reduce(CollectiveCall& c, time_point deadline);
  // Round j of a non-root rank in broadcast/scatter. exact_rounds: the root announces exactly the
  // rounds this rank's total needs (broadcast); otherwise at least as many (scatter: its largest block).
  struct RootRound {
    std::uint64_t seq;
    std::size_t base, j, piece;
    bool exact_rounds;
  };
  // Says ready, learns where the root put this rank's piece, reads it into out; round 0 sets total and rounds.
  asio::awaitable<void> root_piece(std::uint32_t root, RootRound at, std::uint64_t& total, std::size_t& rounds,
                                   std::vector<std::byte>& out, time_point deadline);

  // One message to `to`, counted in the batch (a failure to send is left to the receives).
  void send(const std::shared_ptr<Batch>& b, std::uint32_t to, WorldMessage m, std::span<const std::byte> piece = {});
  // The next message from `from`, which must be (kind, seq, step) or an abort; on_message runs on the loop.
  void expect(const std::shared_ptr<Batch>& b, std::uint32_t from, WorldKind kind, std::uint64_t seq,
              std::uint16_t step, time_point deadline,
              std::function<void(const WorldMessage&, std::span<const std::byte> piece)> on_message);
  // Gets `size` bytes from `from`'s buffer at remote into this session buffer at local.
  void get(const std::shared_ptr<Batch>& b, std::uint32_t from, std::size_t local, std::size_t remote,
           std::size_t size);
  std::shared_ptr<Batch> batch();
  struct Landing;
  static std::function<void(const WorldMessage&, std::span<const std::byte>)> keep(
      std::shared_ptr<std::vector<WorldMessage>> got, std::shared_ptr<std::vector<std::vector<std::byte>>> pieces,
      std::uint32_t p);
  // How long a failed step waits for what it still has in flight (see Batch::wait_settled).
  time_point settle_by() const;

  std::vector<std::uint32_t> others() const;
  std::size_t half() const;
  std::size_t region(std::uint64_t seq) const { return (seq % 2) * half(); }
  asio::awaitable<void> poison(const Fault& f, const char* collective, std::uint64_t seq);

  std::uint64_t seq_ = 0;
  std::exception_ptr poisoned_;
  std::optional<Fault> aborted_;  // announced through the store
  std::set<std::shared_ptr<ConnectWait>> waits_;
  std::deque<Job> queue_;
  bool running_ = false;
  bool shut_ = false;
};

// The store keys of a world (under the store's job id).
std::string rank_key(std::uint32_t rank, const char* what);
// "rank r", as messages name a rank.
std::string rank_name(std::uint32_t r);

}  // namespace hmc::detail
