#pragma once
// Connections between ranks of one Session, made on first use (World and TransferEngine).
//
// Session::connect blocks and refuses the loop thread, so connects run on a connector thread, one
// at a time. The higher rank of a pair always dials and the lower one waits to be dialed, so two
// ranks never dial each other at once. A lower rank that needs a higher one which is not dialing
// rings its doorbell: the next bell key under <prefix><rank>/ in the store, which the higher
// rank's watcher (a parked get) answers by dialing. Addresses come from <prefix><rank>/addr.
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "hmc/session.hpp"
#include "hmc/store/store.hpp"
#include "hmc/world/world.hpp"

namespace hmc::detail {

namespace asio = runtime::asio;
using time_point = std::chrono::steady_clock::time_point;

// A failure with the rank it points at (a dead peer, a silent one, or this rank for local errors).
struct Fault {
  Status status = Status::ERROR;
  std::uint32_t culprit = 0;
  std::string what;
};

class Connector : public std::enable_shared_from_this<Connector> {
 public:
  // on_contact(rank) runs on the connector thread whenever a peer rang this rank's doorbell and
  // the connection to it is up (TransferEngine serves it from then on).
  Connector(Session& session, Store* store, std::uint32_t rank, std::string prefix, std::chrono::milliseconds timeout,
            std::function<void(std::uint32_t)> on_contact = {});
  ~Connector();

  void start();  // the thread, and the doorbell watcher when there is a store
  void stop();   // close the Session first: blocked connects then return

  void set_address(std::uint32_t rank, PeerAddress a);
  // Blocking, connector thread only. announce: ring the peer's bell even when dialing it, so it
  // learns of this rank (TransferEngine). Throws Fault.
  void connect_now(const std::vector<std::uint32_t>& peers, time_point deadline, bool ring, bool announce = false);
  // From a coroutine on the Session's loop: connect_now on the connector thread.
  // (A reference parameter: GCC 12 may destroy by-value coroutine parameters twice inside co_await.)
  asio::awaitable<std::optional<Fault>> connect(const std::vector<std::uint32_t>& wanted, time_point deadline,
                                                bool ring, bool announce = false);
  // Runs job on the connector thread (dropped once it stops).
  void post(std::function<void()> job);

  std::string key(std::uint32_t rank, const std::string& what) const;

 private:
  asio::awaitable<void> doorbells();
  PeerAddress address_of(std::uint32_t peer, time_point deadline);
  void dial(std::uint32_t peer, time_point deadline);
  void ring(std::uint32_t peer);

  Session& session_;
  Store* const store_;
  const std::uint32_t rank_;
  const std::string prefix_;
  const std::chrono::milliseconds timeout_;
  const std::function<void(std::uint32_t)> on_contact_;
  std::uint64_t bells_seen_ = 0;  // loop thread
  bool stopped_ = false;          // loop thread

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::map<std::uint32_t, PeerAddress> directory_;  // guarded by mutex_
  std::thread thread_;
};

}  // namespace hmc::detail
