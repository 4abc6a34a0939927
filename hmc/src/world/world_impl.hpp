#pragma once
// The World's engine: connections (a connector thread around the Session's blocking connect),
// the collective queue and the collectives themselves, on the Session's loop.
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
#include "world/world_message.hpp"

namespace hmc::detail {

namespace asio = runtime::asio;
using time_point = std::chrono::steady_clock::time_point;

// A failure inside a collective, with the rank it points at (a dead peer, a silent one, or this
// rank for local errors); turned into the typed hmc::Error at the top and sent to the peers.
struct Fault {
  Status status = Status::ERROR;
  std::uint32_t culprit = 0;
  std::string what;
};

class Batch;

class WorldImpl : public std::enable_shared_from_this<WorldImpl> {
 public:
  WorldImpl(Session& session, Store* store, std::uint32_t rank, std::uint32_t size, WorldOptions options);
  ~WorldImpl();

  // -- connections -----------------------------------------------------------------------------
  // Starts the connector thread (and the doorbell watcher when there is a store).
  void start();
  // Stops the connector thread; the Session must be closed first so blocked connects return.
  void stop_connector();
  void set_address(std::uint32_t rank, PeerAddress a);
  // Blocking, on the connector thread: dial the lower ranks, wait for the higher ones to dial us.
  void connect_now(const std::vector<std::uint32_t>& peers, time_point deadline, bool ring);
  // (Parameters by reference: GCC 12 may destroy by-value coroutine parameters twice inside co_await.)
  asio::awaitable<void> ensure(const std::vector<std::uint32_t>& wanted, time_point deadline);

  // -- collectives -----------------------------------------------------------------------------
  void submit(CollectiveCall call, asio::any_completion_handler<void(std::exception_ptr, CollectiveResult)> done);
  // Fails everything queued and later with ClosedError (on the loop).
  void shutdown();
  // A collective is running (loop thread).
  bool busy() const noexcept { return running_; }
  // Runs job on the connector thread (dropped once it stops).
  void post_job(std::function<void()> job);

  Session& session;
  Store* const store;
  const std::uint32_t rank;
  const std::uint32_t size;
  const WorldOptions options;
  const runtime::loop_executor ex;

  // Loop thread.
  std::set<std::uint32_t> connected;

 private:
  struct Job {  // move-constructed only (Asio 1.26's any_completion_handler must never be assigned)
    CollectiveCall call;
    asio::any_completion_handler<void(std::exception_ptr, CollectiveResult)> done;
  };

  asio::awaitable<void> run_queue();
  asio::awaitable<void> run(CollectiveCall& call, CollectiveResult& result);
  asio::awaitable<void> doorbells();

  asio::awaitable<void> barrier(time_point deadline);
  asio::awaitable<void> broadcast(CollectiveCall& c, CollectiveResult& r, time_point deadline);
  asio::awaitable<void> all_gather(CollectiveCall& c, CollectiveResult& r, time_point deadline);
  asio::awaitable<void> gather(CollectiveCall& c, CollectiveResult& r, time_point deadline);
  asio::awaitable<void> scatter(CollectiveCall& c, CollectiveResult& r, time_point deadline);
  asio::awaitable<void> all_to_all(CollectiveCall& c, CollectiveResult& r, time_point deadline);
  asio::awaitable<void> all_reduce(CollectiveCall& c, time_point deadline);

  // One message to `to`; its failure (if any) lands in the batch.
  void send(const std::shared_ptr<Batch>& b, std::uint32_t to, WorldMessage m);
  // The next message from `from`, which must be (kind, seq, step) or an abort; on_message runs on the loop.
  void expect(const std::shared_ptr<Batch>& b, std::uint32_t from, WorldKind kind, std::uint64_t seq,
              std::uint16_t step, time_point deadline, std::function<void(const WorldMessage&)> on_message);
  // Gets `size` bytes from `from`'s buffer at remote into this session buffer at local.
  void get(const std::shared_ptr<Batch>& b, std::uint32_t from, std::size_t local, std::size_t remote,
           std::size_t size);
  std::shared_ptr<Batch> batch();

  std::vector<std::uint32_t> others() const;
  std::size_t half() const;
  std::size_t region(std::uint64_t seq) const { return (seq % 2) * half(); }
  void poison(const Fault& f, const char* collective, std::uint64_t seq);
  std::optional<PeerAddress> address_of(std::uint32_t peer, time_point deadline);
  void dial(std::uint32_t peer, time_point deadline);

  std::uint64_t seq_ = 0;
  std::exception_ptr poisoned_;
  std::deque<Job> queue_;
  bool running_ = false;
  bool shut_ = false;
  std::uint64_t bells_seen_ = 0;

  // The connector thread and what it reads.
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::thread connector_;
  std::vector<std::optional<PeerAddress>> directory_;  // guarded by mutex_
};

// The store keys of a world (under the store's job id).
std::string rank_key(std::uint32_t rank, const char* what);

}  // namespace hmc::detail
