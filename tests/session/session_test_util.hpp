#pragma once
// Helpers for Session tests: deterministic byte patterns and a connected server/client pair.
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "hmc/session.hpp"

namespace hmc::test {

// A byte pattern that differs for every (seed, index): stale or misplaced bytes never match.
inline std::vector<std::byte> pattern(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> v(n);
  std::byte* p = v.data();
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  // Eight bytes per step: the 64 MiB cases spent most of their time here under ASan at -O0.
  for (std::size_t i = 0; i < n; i += sizeof x) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    std::memcpy(p + i, &x, n - i < sizeof x ? n - i : sizeof x);
  }
  return v;
}

inline void fill(ConnBuffer& b, std::size_t offset, std::size_t n, std::uint64_t seed) {
  const auto p = pattern(n, seed);
  b.write_from_cpu(p.data(), n, offset);
}

inline bool holds(const ConnBuffer& b, std::size_t offset, std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> got(n);
  b.read_to_cpu(got.data(), n, offset);
  return got == pattern(n, seed);
}

inline std::string temp_dir() {
  char tmpl[] = "/tmp/hmc-session-XXXXXX";
  const char* d = ::mkdtemp(tmpl);
  return d ? d : "/tmp";
}

inline SessionOptions session_options(const std::string& tls, runtime::ProgressMode mode, std::size_t buffer,
                                      const std::string& uds_dir) {
  SessionOptions o;
  o.buffer_size = buffer;
  o.ucx_tls = tls;
  o.ucx_net_devices = "lo";  // keep UCX's tcp traffic on loopback
  o.progress_mode = mode;
  o.timeout = std::chrono::seconds(20);
  o.ctrl.uds_dir = uds_dir;
  return o;
}

// A server with its own progress thread and a client made with `client_options`, connected as ranks
// 0 and 1. The server's side is ready once its endpoint is wired up, which over tcp needs the
// client's loop: a caller-driven client progresses only when called, so it is driven meanwhile.
inline void connect_pair(const SessionOptions& server_options, const SessionOptions& client_options,
                         const std::string& uds_dir, std::uint16_t data_port, std::unique_ptr<Session>& server,
                         std::unique_ptr<Session>& client) {
  SessionOptions own = server_options;
  own.progress_thread = ProgressThread::own;
  server = std::make_unique<Session>(own);
  server->init_server("127.0.0.1", data_port, 0, 0, 0, uds_dir);
  client = std::make_unique<Session>(client_options);
  if (client->connect(0, 1, "127.0.0.1", data_port, server->ctrl_port()) != 0)
    throw std::runtime_error("connect_pair: connect() did not return rank 0");
  auto ready = std::async(std::launch::async, [&] { server->wait_peer(1, std::chrono::seconds(20)); });
  while (ready.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready) (void)client->progress();
  ready.get();
}

// A session's loop thread, watched from outside: how often it wakes up (/proc) and how much CPU it
// uses (its CPU-time clock, exact, where /proc's tick counts charge whole ticks to whoever runs then).
class LoopThread {
 public:
  explicit LoopThread(Session& s) {
    std::promise<std::pair<pid_t, clockid_t>> ids;
    runtime::asio::post(s.executor(), [&] {
      clockid_t clock{};
      if (::pthread_getcpuclockid(::pthread_self(), &clock) != 0) clock = CLOCK_THREAD_CPUTIME_ID;
      ids.set_value({static_cast<pid_t>(::syscall(SYS_gettid)), clock});
    });
    std::tie(tid_, clock_) = ids.get_future().get();
  }
  struct Usage {
    long wakeups = 0;      // voluntary context switches: each sleep of the loop ends in one
    long preemptions = 0;  // involuntary ones: the thread was runnable and another ran
    double cpu = 0;        // seconds of CPU
  };
  Usage now() const {
    Usage u;
    std::ifstream status("/proc/self/task/" + std::to_string(tid_) + "/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0) u.wakeups = std::stol(line.substr(24));
      else if (line.rfind("nonvoluntary_ctxt_switches:", 0) == 0) u.preemptions = std::stol(line.substr(27));
    ::timespec t{};
    if (::clock_gettime(clock_, &t) != 0)
      throw std::runtime_error("LoopThread: cannot read the loop thread's CPU clock");
    u.cpu = static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
    return u;
  }
  // Usage over the next `d` (the caller's thread sleeps meanwhile).
  Usage measure(std::chrono::milliseconds d) const {
    const Usage a = now();
    std::this_thread::sleep_for(d);
    const Usage b = now();
    return {b.wakeups - a.wakeups, b.preemptions - a.preemptions, b.cpu - a.cpu};
  }

 private:
  pid_t tid_ = 0;
  clockid_t clock_ = CLOCK_THREAD_CPUTIME_ID;
};

}  // namespace hmc::test
