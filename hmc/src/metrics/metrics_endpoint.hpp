#pragma once
// An HTTP endpoint serving the stats of the sessions that name its address, in Prometheus' text
// format at GET /metrics: one per host:port in the process, on its own loop thread, read-only.
// Hostile clients cost little: a request is at most 8 KiB and 2 s, 16 connections at once.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "hmc/runtime/event_loop.hpp"
#include "hmc/session_stats.hpp"

namespace hmc::detail {

class MetricsEndpoint {
 public:
  // A session's stats, or nothing when its loop did not answer in time (it is skipped).
  using Source = std::function<std::optional<SessionStats>()>;

  // The endpoint at host:port, listening from its first user on; InvalidConfigError when the
  // address cannot be listened on. The last user's release closes it.
  static std::shared_ptr<MetricsEndpoint> at(const std::string& host, std::uint16_t port);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // A session's stats, labelled session="<id>" in the page. remove() waits for a scrape reading
  // it, which gives each source at most a second.
  std::uint64_t add(Source source);
  void remove(std::uint64_t id);
  std::uint16_t port() const noexcept { return port_; }
  // The page a scrape gets.
  std::string render();

 private:
  struct State;
  explicit MetricsEndpoint(const std::string& host, std::uint16_t port);

  runtime::EventLoop loop_;
  std::shared_ptr<State> state_;  // the acceptor and connections, on loop_
  std::mutex sources_mutex_;      // held over a scrape, so that remove() never races one
  std::map<std::uint64_t, Source> sources_;
  std::uint64_t next_id_ = 1;
  std::uint16_t port_ = 0;
};

}  // namespace hmc::detail
