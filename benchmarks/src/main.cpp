// hmc_bench: HMC measured the way the field measures transfer libraries, written with coroutines
// on the Session's own loop. `--role loopback` (default) spawns the server side(s) as processes and
// runs the client; `--role server` / `--role client` run the two sides on two hosts.
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <future>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_options.hpp"
#include "hmc/error.hpp"
#include "hmc/session.hpp"

extern char** environ;

namespace hmc::bench {
namespace {

namespace asio = runtime::asio;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

const char* const kTests[] = {"put_bw", "get_bw",   "put_lat", "get_lat",    "batch", "pipeline",
                              "idle",   "put_sync", "tag_lat", "notify_lat", "kv"};
constexpr auto kIdleTime = 1s;  // the idle test: connected, nothing sent
constexpr std::uint32_t kFinish = 99;
constexpr std::size_t kPipelineChunk = 1u << 20;

struct TestSpec {  // client -> server before each test
  std::uint32_t test;
  std::uint32_t reserved;
  std::uint64_t size, iters, depth;
};
struct TestDone {  // server -> client after each test
  double cpu_seconds;
};

asio::awaitable<void> put_notify(Session& s, std::uint32_t peer, std::size_t size, std::uint64_t tag) {
  co_await s.async_put_notify(peer, 0, 0, size, CtrlMessage::from_tag(tag), asio::use_awaitable);
}

bool latency_test(const std::string& t) {
  return t == "put_lat" || t == "get_lat" || t == "put_sync" || t == "tag_lat" || t == "notify_lat";
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

std::uint32_t test_id(const std::string& name) {
  for (std::uint32_t i = 0; i < std::size(kTests); ++i)
    if (name == kTests[i]) return i;
  throw std::invalid_argument("unknown test " + name);
}

std::size_t buffer_for(const Options& o) {
  const std::size_t biggest = *std::max_element(o.sizes.begin(), o.sizes.end());
  const bool kv = std::find(o.tests.begin(), o.tests.end(), "kv") != o.tests.end();
  return std::max<std::size_t>(kv ? biggest * o.depth : biggest, 1u << 20);
}

SessionOptions session_options(const Options& o, bool client) {
  SessionOptions s;
  if (!client) s.progress_thread = ProgressThread::own;  // servers keep their own thread, whatever the default
  if (client && o.progress_thread_name != "default") s.progress_thread = o.progress_thread;
  s.buffer_size = buffer_for(o);
  s.progress_mode = o.mode;
  // "hmc-tcp": HMC's checked TCP data path, which same-host peers use when told not to share memory.
  s.ucx_tls = o.tls == "hmc-tcp" ? std::string() : o.tls;
  s.shared_memory = o.tls != "hmc-tcp";
  s.ucx_net_devices = o.net_devices;
  s.timeout = 60s;
  s.max_inflight = std::max<std::size_t>(1024, o.depth * 2);
  return s;
}

// ---------------------------------------------------------------------------------------- server
asio::awaitable<void> echo(Session& s, std::uint32_t client, const TestSpec& spec) {
  for (std::uint64_t i = 0; i < spec.iters; ++i) {
    const auto m = co_await s.async_ctrl_recv(client, 60s, asio::use_awaitable);  // tag_lat, notify_lat: no data back
    if (spec.test == test_id("put_lat")) co_await s.async_put(client, 0, 0, spec.size, asio::use_awaitable);
    co_await s.async_ctrl_send(client, m, asio::use_awaitable);
  }
}

int run_server(const Options& o) {
  Session s(session_options(o, false));
  s.init_server(o.host, o.port, 0, o.port, o.server_rank);
  std::printf("READY %u\n", s.ctrl_port());
  std::fflush(stdout);
  s.wait_peer(o.rank, 120s);
  for (;;) {
    const auto spec = s.async_ctrl_recv(o.rank, 600s, asio::use_future).get().as<TestSpec>();
    if (spec.test == kFinish) return 0;
    const double cpu0 = cpu_seconds();
    s.ctrl_send(o.rank, 1);  // ready: the client starts its clock now
    if (spec.test == test_id("put_lat") || spec.test == test_id("tag_lat") || spec.test == test_id("notify_lat")) {
      asio::co_spawn(s.executor(), echo(s, o.rank, spec), asio::use_future).get();
    }
    s.ctrl_recv(o.rank, 600s);  // the client finished
    s.async_ctrl_send(o.rank, CtrlMessage::from_struct(TestDone{cpu_seconds() - cpu0}), asio::use_future).get();
  }
}

// ---------------------------------------------------------------------------------------- client
struct Result {
  std::string test;
  std::size_t size = 0, depth = 0;
  long iters = 0;
  double seconds = 0, bw_mbps = 0, msg_rate = 0, p50_us = 0, p99_us = 0, max_us = 0, cpu_s_per_gb = 0;
  // The lanes' bytes per median operation time: the steady state without the stalls a loaded machine
  // adds (ucx_raw_bench's bw_p50_mbps, per window, is the same figure for raw UCX).
  double bw_p50_mbps = 0;
  double cpu_pct = 0;  // CPU of both processes during the measurement, in % of one core
};

struct Peer {
  std::uint32_t rank;
};

long iterations(const Options& o, const std::string& test, std::size_t size) {
  if (o.iters > 0) return o.iters;
  const bool latency = latency_test(test);
  const std::size_t budget = latency ? (64u << 20) : (512u << 20);  // bytes moved per measurement
  if (test == "kv") return std::clamp<long>(static_cast<long>(budget / (size * o.depth)), 10, 100'000);
  const long n = static_cast<long>(budget / size);
  return std::clamp<long>(n, latency ? 100 : 64, latency ? 10'000 : 100'000);
}

// kv: one region of `depth` blocks and two block tables shuffled as ucx_raw_bench scatter's (seed
// 42), so that both move the same segments. Made outside the coroutine: GCC 12 miscompiles an
// initializer list inside one.
struct KvTables {
  std::optional<KvLayout> layout;
  std::vector<std::uint64_t> src, dst;
};

KvTables kv_tables(std::size_t size, std::size_t depth) {
  KvTables t{KvLayout({KvRegion{0, size, depth, 0}}), std::vector<std::uint64_t>(depth), {}};
  std::iota(t.src.begin(), t.src.end(), 0);
  t.dst = t.src;
  std::mt19937_64 rng(42);
  std::shuffle(t.src.begin(), t.src.end(), rng);
  std::shuffle(t.dst.begin(), t.dst.end(), rng);
  return t;
}

// One lane: `n` sequential operations, each latency recorded. One clock read per operation (an
// operation ends where the next begins): at 64 KiB on shared memory a second read was ~4% of an op.
asio::awaitable<void> lane(Session& s, const std::string& test, std::uint32_t peer, std::size_t size, std::size_t depth,
                           long n, std::vector<double>& lat) {
  lat.reserve(lat.size() + static_cast<std::size_t>(n));  // no reallocation while measuring
  const bool put_bw = test == "put_bw";                   // compared once, not once per operation
  const KvTables kv = test == "kv" ? kv_tables(size, depth) : KvTables{};
  auto t0 = clock_type::now();
  for (long i = 0; i < n; ++i) {
    if (put_bw) {
      co_await s.async_put(peer, 0, 0, size, asio::use_awaitable);
    } else if (test == "get_bw" || test == "get_lat") {
      co_await s.async_get(peer, 0, 0, size, asio::use_awaitable);
    } else if (test == "put_lat") {
      co_await s.async_put(peer, 0, 0, size, asio::use_awaitable);
      co_await s.async_ctrl_send(peer, CtrlMessage::from_tag(static_cast<std::uint64_t>(i)), asio::use_awaitable);
      co_await s.async_ctrl_recv(peer, 60s, asio::use_awaitable);  // the peer's data is here too
    } else if (test == "tag_lat") {                                // put, then a tag; the peer answers the tag
      co_await s.async_put(peer, 0, 0, size, asio::use_awaitable);
      co_await s.async_ctrl_send(peer, CtrlMessage::from_tag(static_cast<std::uint64_t>(i)), asio::use_awaitable);
      co_await s.async_ctrl_recv(peer, 60s, asio::use_awaitable);
    } else if (test == "notify_lat") {  // put-with-notify; the peer answers the tag
      co_await put_notify(s, peer, size, static_cast<std::uint64_t>(i));
      co_await s.async_ctrl_recv(peer, 60s, asio::use_awaitable);
    } else if (test == "kv") {
      co_await s.async_put_blocks(peer, *kv.layout, kv.src, *kv.layout, kv.dst, asio::use_awaitable);
    } else if (test == "batch") {
      std::vector<Segment> segs(depth, Segment{0, 0, size});
      co_await s.async_put_batch(peer, std::move(segs), asio::use_awaitable);
    } else {  // pipeline: one range of `size` bytes cut into 1 MiB chunks, `depth` chunks in flight
      co_await s.async_put_pipeline(peer, 0, 0, size, std::min(size, kPipelineChunk), depth, asio::use_awaitable);
    }
    const auto t1 = clock_type::now();
    lat.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    t0 = t1;
  }
}

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1))];
}

// The future's value; with ProgressThread::caller this thread drives the session's loop meanwhile
// (progress() while it has work, else a short sleep on its wakeup fd); shared: progress_until.
template <class T>
T finish(Session& s, const Options& o, std::future<T> f) {
  const ProgressThread thread = session_options(o, true).progress_thread;  // also when that is the default
  if (thread == ProgressThread::shared) {
    s.progress_until([&f] { return f.wait_for(0s) == std::future_status::ready; }, clock_type::now() + 600s);
  } else if (thread == ProgressThread::caller) {
    while (f.wait_for(0s) != std::future_status::ready) {
      if (s.progress() > 0) continue;
      pollfd p{s.wakeup_fd(), POLLIN, 0};
      ::poll(&p, 1, 1);
    }
  }
  return f.get();
}

Result measure(Session& s, const std::vector<Peer>& peers, const Options& o, const std::string& test,
               std::size_t size) {
  const bool latency = latency_test(test);
  const bool batched = test == "batch" || test == "kv";  // one operation moves `depth` segments
  const std::size_t lanes = latency || batched || test == "pipeline" ? 1 : o.depth;
  const long n = iterations(o, test, size);
  const long warm = o.warmup > 0 ? o.warmup : std::max<long>(n / 10, 4);
  const long per_lane = std::max<long>(n / static_cast<long>(lanes), 1);
  const TestSpec spec{test_id(test), 0, size, static_cast<std::uint64_t>(per_lane + warm), o.depth};
  for (const auto& p : peers) {
    finish(s, o, s.async_ctrl_send(p.rank, CtrlMessage::from_struct(spec), asio::use_future));
    finish(s, o, s.async_ctrl_recv(p.rank, 60s, asio::use_future));
  }
  auto run_lanes = [&](long count, std::vector<std::vector<double>>& lat) {
    if (test == "put_sync") {  // blocking puts from this (the user's) thread, one peer after the other
      for (std::size_t l = 0; l < peers.size(); ++l) {
        for (long i = 0; i < count; ++i) {
          const auto t0 = clock_type::now();
          s.put(peers[l].rank, 0, 0, size);
          lat[l].push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
        }
      }
      return;
    }
    std::vector<std::future<void>> done;
    for (std::size_t l = 0; l < lanes * peers.size(); ++l)
      done.push_back(asio::co_spawn(
          s.executor(), lane(s, test, peers[l % peers.size()].rank, size, o.depth, count, lat[l]), asio::use_future));
    for (auto& f : done) finish(s, o, std::move(f));
  };
  std::vector<std::vector<double>> lat(lanes * peers.size());
  if (test != "idle") run_lanes(warm, lat);  // the servers of latency tests echo warm-up rounds too
  for (auto& v : lat) v.clear();
  const double cpu0 = cpu_seconds();
  const auto t0 = clock_type::now();
  if (test == "idle") {
    std::this_thread::sleep_for(kIdleTime);
  } else {
    run_lanes(per_lane, lat);
  }
  const double secs = std::chrono::duration<double>(clock_type::now() - t0).count();
  double cpu = cpu_seconds() - cpu0;
  for (const auto& p : peers) {
    finish(s, o, s.async_ctrl_send(p.rank, CtrlMessage::from_tag(0), asio::use_future));
    cpu += finish(s, o, s.async_ctrl_recv(p.rank, 60s, asio::use_future)).as<TestDone>().cpu_seconds;
  }
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  Result r;
  r.test = test;
  r.size = size;
  r.depth = lanes == 1 && !latency ? o.depth : lanes;
  r.iters = test == "idle" ? 0 : per_lane * static_cast<long>(lanes * peers.size());
  r.seconds = secs;
  const double per_op_bytes =
      static_cast<double>(size) * (batched ? static_cast<double>(o.depth) : 1.0) * (test == "put_lat" ? 2.0 : 1.0);
  const double bytes = per_op_bytes * static_cast<double>(r.iters);
  r.bw_mbps = bytes / secs / 1e6;
  r.msg_rate = static_cast<double>(r.iters) * (batched ? static_cast<double>(o.depth) : 1.0) / secs;
  r.p50_us = percentile(all, 0.50);
  if (r.p50_us > 0 && test != "idle")
    r.bw_p50_mbps = per_op_bytes * static_cast<double>(test == "put_sync" ? 1 : lanes * peers.size()) / r.p50_us;
  r.p99_us = percentile(all, 0.99);
  r.max_us = all.empty() ? 0 : all.back();
  r.cpu_s_per_gb = bytes > 0 ? cpu / (bytes / 1e9) : 0;
  r.cpu_pct = 100.0 * cpu / secs;
  return r;
}

std::string human(std::size_t n) {
  char b[32];
  if (n >= (1u << 20) && n % (1u << 20) == 0) std::snprintf(b, sizeof b, "%zuM", n >> 20);
  else if (n >= 1024 && n % 1024 == 0) std::snprintf(b, sizeof b, "%zuK", n >> 10);
  else std::snprintf(b, sizeof b, "%zu", n);
  return b;
}

void write_outputs(const Options& o, const std::vector<Result>& rs) {
  const std::string mode(runtime::to_string(o.mode));
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    f << "{\"meta\": {\"impl\": \"hmc-cpp\", \"tls\": \"" << (o.tls.empty() ? "default" : o.tls) << "\", \"mode\": \""
      << mode << "\", \"progress_thread\": \"" << o.progress_thread_name << "\", \"depth\": " << o.depth
      << ", \"peers\": " << o.peers << "},\n \"results\": [\n";
    for (std::size_t i = 0; i < rs.size(); ++i) {
      const auto& r = rs[i];
      f << "  {\"test\": \"" << r.test << "\", \"size\": " << r.size << ", \"depth\": " << r.depth
        << ", \"iters\": " << r.iters << ", \"seconds\": " << r.seconds << ", \"bw_mbps\": " << r.bw_mbps
        << ", \"msg_rate\": " << r.msg_rate << ", \"bw_p50_mbps\": " << r.bw_p50_mbps
        << ", \"lat_p50_us\": " << r.p50_us << ", \"lat_p99_us\": " << r.p99_us << ", \"lat_max_us\": " << r.max_us
        << ", \"cpu_s_per_gb\": " << r.cpu_s_per_gb << ", \"cpu_pct\": " << r.cpu_pct << "}"
        << (i + 1 < rs.size() ? ",\n" : "\n");
    }
    f << " ]}\n";
  }
  if (!o.csv.empty()) {
    std::ofstream f(o.csv);
    f << "impl,tls,mode,test,size,depth,iters,seconds,bw_mbps,msg_rate,bw_p50_mbps,lat_p50_us,lat_p99_us,lat_max_us,"
         "cpu_s_per_gb,"
         "cpu_pct\n";
    for (const auto& r : rs)
      f << "hmc-cpp," << (o.tls.empty() ? "default" : o.tls) << "," << mode << "," << r.test << "," << r.size << ","
        << r.depth << "," << r.iters << "," << r.seconds << "," << r.bw_mbps << "," << r.msg_rate << ","
        << r.bw_p50_mbps << "," << r.p50_us << "," << r.p99_us << "," << r.max_us << "," << r.cpu_s_per_gb << ","
        << r.cpu_pct << "\n";
  }
}

int run_client(const Options& o, const std::vector<std::pair<std::uint32_t, std::uint16_t>>& servers) {
  Session s(session_options(o, true));
  std::vector<Peer> peers;
  for (const auto& [rank, port] : servers) {
    // A server started with --port P serves data port P; loopback starts them with --port 0.
    s.connect(rank, o.rank, o.host, o.role == "client" ? port : 0, port);
    peers.push_back({rank});
  }
  if (!o.quiet)
    std::printf("hmc_bench: %s progress (progress thread: %s), UCX %s, depth %zu, %zu peer(s)\n",
                runtime::to_string(o.mode).data(), o.progress_thread_name.c_str(),
                s.transports(peers.front().rank).c_str(), o.depth, peers.size());
  std::vector<Result> results;
  if (!o.quiet)
    std::printf("%-9s %8s %8s %12s %12s %10s %10s %10s %10s %8s\n", "test", "size", "iters", "MB/s", "msg/s", "p50 us",
                "p99 us", "max us", "CPU s/GB", "CPU %");
  const std::size_t total = o.tests.size() * o.sizes.size();
  std::size_t done = 0;
  for (const auto& test : o.tests) {
    for (std::size_t size : o.sizes) {
      if (!o.quiet)
        std::fprintf(stderr, "\r[%zu/%zu] %s %s ...      ", ++done, total, test.c_str(), human(size).c_str());
      Result r = measure(s, peers, o, test, size);
      if (!o.quiet) {
        std::fprintf(stderr, "\r%60s\r", "");
        std::printf("%-9s %8s %8ld %12.1f %12.0f %10.2f %10.2f %10.2f %10.3f %8.2f\n", r.test.c_str(),
                    human(r.size).c_str(), r.iters, r.bw_mbps, r.msg_rate, r.p50_us, r.p99_us, r.max_us, r.cpu_s_per_gb,
                    r.cpu_pct);
        std::fflush(stdout);
      }
      results.push_back(r);
    }
  }
  for (const auto& p : peers)
    finish(s, o, s.async_ctrl_send(p.rank, CtrlMessage::from_struct(TestSpec{kFinish, 0, 0, 0, 0}), asio::use_future));
  write_outputs(o, results);
  return 0;
}

// Starts one server process per peer and returns (pid, port) for each.
std::vector<std::pair<pid_t, std::uint16_t>> spawn_servers(const Options& o) {
  std::vector<std::pair<pid_t, std::uint16_t>> out;
  for (std::uint32_t i = 0; i < o.peers; ++i) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    std::vector<std::string> args{o.self,
                                  "--role",
                                  "server",
                                  "--port",
                                  "0",
                                  "--host",
                                  o.host,
                                  "--mode",
                                  std::string(runtime::to_string(o.mode)),
                                  "--net-devices",
                                  o.net_devices,
                                  "--sizes",
                                  std::to_string(buffer_for(o)),
                                  "--rank",
                                  std::to_string(o.rank),
                                  "--server-rank",
                                  std::to_string(100 + i)};
    if (!o.tls.empty()) args.insert(args.end(), {"--tls", o.tls});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, o.self.c_str(), &fa, nullptr, argv.data(), environ) != 0)
      throw std::runtime_error("cannot start the server process " + o.self);
    posix_spawn_file_actions_destroy(&fa);
    ::close(fds[1]);
    FILE* f = fdopen(fds[0], "r");
    unsigned port = 0;
    if (f == nullptr || std::fscanf(f, "READY %u", &port) != 1) throw std::runtime_error("server did not start");
    std::fclose(f);
    out.emplace_back(pid, static_cast<std::uint16_t>(port));
  }
  return out;
}

}  // namespace
}  // namespace hmc::bench

int main(int argc, char** argv) {
  using namespace hmc::bench;
  Options o;
  try {
    o = parse_options(argc, argv);
  } catch (const std::exception& e) {
    if (*e.what() != '\0') std::fprintf(stderr, "hmc_bench: %s\n", e.what());
    std::fputs(Options::usage().c_str(), stderr);
    return 2;
  }
  try {
    if (o.role == "server") return run_server(o);
    if (o.role == "client") return run_client(o, {{o.server_rank, o.port}});
    auto servers = spawn_servers(o);
    std::vector<std::pair<std::uint32_t, std::uint16_t>> ports;
    for (std::uint32_t i = 0; i < servers.size(); ++i) ports.emplace_back(100 + i, servers[i].second);
    int rc = 1;
    try {
      rc = run_client(o, ports);
    } catch (...) {
      for (auto& [pid, port] : servers) ::kill(pid, SIGKILL);
      throw;
    }
    for (auto& [pid, port] : servers) ::waitpid(pid, nullptr, 0);
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hmc_bench: %s\n", e.what());
    return 1;
  }
}
