// hmc_bench: HMC measured the way the field measures transfer libraries, written with coroutines
// on the Session's own loop. `--role loopback` (default) spawns the server side(s) as processes and
// runs the client; `--role server` / `--role client` run the two sides on two hosts.
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
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

const char* const kTests[] = {"put_bw",   "get_bw",  "put_lat",    "get_lat", "batch", "pipeline", "idle",
                              "put_sync", "tag_lat", "notify_lat", "kv",      "cold",  "reg",      "recovery"};
constexpr auto kIdleTime = 1s;                // the idle test: connected, nothing sent
constexpr auto kRecoveryTimeout = 10s;        // every wait of the recovery test: a loss never seen fails the run
constexpr std::uint32_t kColdRank = 1000;     // cold: client ranks 1000, 1001, ... (a new peer each time)
constexpr std::uint32_t kRecoveryRank = 500;  // recovery: server ranks 500, 501, ... (a new peer each time)
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
  double seconds = 0, bw_mbps = 0, msg_rate = 0, p50_us = 0, p99_us = 0, p999_us = 0, max_us = 0, cpu_s_per_gb = 0;
  // The lanes' bytes per median operation time: the steady state without the stalls a loaded machine
  // adds (ucx_raw_bench's bw_p50_mbps, per window, is the same figure for raw UCX).
  double bw_p50_mbps = 0;
  double cpu_pct = 0;     // CPU of both processes during the measurement, in % of one core
  double ms_per_gib = 0;  // reg, unreg: the median call's time per GiB of memory
  std::string note;       // printed after the row and written to the JSON
};

struct Peer {
  std::uint32_t rank;
  std::uint16_t port;  // its control port
};

long iterations(const Options& o, const std::string& test, std::size_t size) {
  if (o.iters > 0) return o.iters;
  if (test == "cold") return 20;     // a connect takes milliseconds
  if (test == "recovery") return 5;  // each one starts a server process
  if (test == "reg") return std::clamp<long>(static_cast<long>((std::size_t{1} << 30) / size), 20, 1000);
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

// Nearest lower rank: element floor(p * (n - 1)) of the sorted times.
double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1))];
}

// p50, p99, p99.9 and max of one operation's times (us).
void set_latency(Result& r, std::vector<double> lat) {
  r.p50_us = percentile(lat, 0.50);
  r.p99_us = percentile(lat, 0.99);
  r.p999_us = percentile(lat, 0.999);
  r.max_us = lat.empty() ? 0 : lat.back();
}

double micros(clock_type::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

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

// Tells the servers which test comes and returns once each is ready (its CPU clock runs).
void begin_test(Session& s, const std::vector<Peer>& peers, const Options& o, const TestSpec& spec) {
  for (const auto& p : peers) {
    finish(s, o, s.async_ctrl_send(p.rank, CtrlMessage::from_struct(spec), asio::use_future));
    finish(s, o, s.async_ctrl_recv(p.rank, 60s, asio::use_future));
  }
}

// Tells the servers the test is over; returns the CPU seconds they used during it.
double end_test(Session& s, const std::vector<Peer>& peers, const Options& o) {
  double cpu = 0;
  for (const auto& p : peers) {
    finish(s, o, s.async_ctrl_send(p.rank, CtrlMessage::from_tag(0), asio::use_future));
    cpu += finish(s, o, s.async_ctrl_recv(p.rank, 60s, asio::use_future)).as<TestDone>().cpu_seconds;
  }
  return cpu;
}

Result measure(Session& s, const std::vector<Peer>& peers, const Options& o, const std::string& test,
               std::size_t size) {
  const bool latency = latency_test(test);
  const bool batched = test == "batch" || test == "kv";  // one operation moves `depth` segments
  const std::size_t lanes = latency || batched || test == "pipeline" ? 1 : o.depth;
  const long n = iterations(o, test, size);
  const long warm = o.warmup > 0 ? o.warmup : std::max<long>(n / 10, 4);
  const long per_lane = std::max<long>(n / static_cast<long>(lanes), 1);
  begin_test(s, peers, o, TestSpec{test_id(test), 0, size, static_cast<std::uint64_t>(per_lane + warm), o.depth});
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
  const double cpu = cpu_seconds() - cpu0 + end_test(s, peers, o);
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
  set_latency(r, std::move(all));
  if (r.p50_us > 0 && test != "idle")
    r.bw_p50_mbps = per_op_bytes * static_cast<double>(test == "put_sync" ? 1 : lanes * peers.size()) / r.p50_us;
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

// ------------------------------------------------------------------------------- server processes
struct ServerProcess {
  pid_t pid;
  std::uint16_t port;  // its control port
  std::uint32_t rank;
};

// Starts `--role server` as a process of this program, serving rank o.rank, and waits for its READY.
ServerProcess spawn_server(const Options& o, std::uint32_t rank) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  // Nothing else of ours: a server started later would otherwise hold our sockets to other servers.
  posix_spawn_file_actions_addclosefrom_np(&fa, STDERR_FILENO + 1);
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
                                std::to_string(rank)};
  if (!o.tls.empty()) args.insert(args.end(), {"--tls", o.tls});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, o.self.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    throw std::runtime_error("cannot start the server process " + o.self);
  }
  FILE* f = fdopen(fds[0], "r");
  unsigned port = 0;
  const bool ready = f != nullptr && std::fscanf(f, "READY %u", &port) == 1;
  if (f != nullptr) std::fclose(f);
  if (!ready) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    throw std::runtime_error("server did not start");
  }
  return {pid, static_cast<std::uint16_t>(port), rank};
}

// Server processes that are killed and reaped if the run leaves before it reaped them itself.
struct Reaper {
  std::vector<pid_t> pids;
  Reaper() = default;
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;
  ~Reaper() {
    for (pid_t pid : pids) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  void reap(pid_t pid) {
    ::waitpid(pid, nullptr, 0);
    std::erase(pids, pid);
  }
};

// ------------------------------------------------------------------ cold, reg, recovery (client)
// One row of `n` timed calls of one kind.
Result timed_row(const std::string& test, std::size_t size, long n, double seconds, std::vector<double> lat) {
  Result r;
  r.test = test;
  r.size = size;
  r.depth = 1;
  r.iters = n;
  r.seconds = seconds;
  set_latency(r, std::move(lat));
  return r;
}

// cold: each iteration a new Session (a rank no session of this run used) connects to the first
// server and puts `size` bytes. Rows: cold = connect + first put, cold_conn = the connect alone,
// cold_new = the Session's construction before it (not in cold). Its close is in no row.
std::vector<Result> measure_cold(Session& s, const Peer& peer, const Options& o, std::size_t size) {
  static std::uint32_t next_rank = kColdRank;
  const long n = iterations(o, "cold", size);
  SessionOptions so = session_options(o, true);
  so.buffer_size = std::max<std::size_t>(size, 4096);  // the first put's bytes, at least a page
  begin_test(s, {peer}, o, TestSpec{test_id("cold"), 0, size, static_cast<std::uint64_t>(n), o.depth});
  std::vector<double> created, connected, total;
  const double cpu0 = cpu_seconds();
  const auto start = clock_type::now();
  for (long i = 0; i < n; ++i) {
    const auto t0 = clock_type::now();
    Session c(so);
    const auto t1 = clock_type::now();
    c.connect(peer.rank, next_rank++, o.host, o.role == "client" ? peer.port : 0, peer.port);
    const auto t2 = clock_type::now();
    c.put(peer.rank, 0, 0, size);
    const auto t3 = clock_type::now();
    created.push_back(micros(t1 - t0));
    connected.push_back(micros(t2 - t1));
    total.push_back(micros(t3 - t1));
  }
  const double secs = std::chrono::duration<double>(clock_type::now() - start).count();
  const double cpu = cpu_seconds() - cpu0 + end_test(s, {peer}, o);
  std::vector<Result> rows{timed_row("cold", size, n, secs, total), timed_row("cold_conn", size, n, secs, connected),
                           timed_row("cold_new", size, n, secs, created)};
  for (auto& r : rows) r.cpu_pct = 100.0 * cpu / secs;  // the whole loop, both processes, closes included
  return rows;
}

// reg: register_memory of a fresh, touched mapping of `size` bytes, then its unregistration (the
// handle's destruction), each timed. No peer takes part; seconds, MB/s and msg/s count the calls only.
std::vector<Result> measure_reg(Session& s, const Options& o, std::size_t size) {
  const long n = iterations(o, "reg", size);
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t mapped = (size + page - 1) / page * page;
  std::vector<double> reg, unreg;
  for (long i = 0; i < n; ++i) {
    void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("reg: cannot map " + std::to_string(mapped) + " bytes");
    std::memset(p, 1, mapped);  // the pages exist before registration, as a model's tensors do
    const auto t0 = clock_type::now();
    std::optional<RegisteredMemory> m(s.register_memory(p, size));
    const auto t1 = clock_type::now();
    m.reset();
    const auto t2 = clock_type::now();
    ::munmap(p, mapped);
    reg.push_back(micros(t1 - t0));
    unreg.push_back(micros(t2 - t1));
  }
  const double gib = static_cast<double>(size) / static_cast<double>(std::size_t{1} << 30);
  std::vector<Result> rows;
  for (const auto& [name, lat] : {std::pair<std::string, const std::vector<double>*>{"reg", &reg}, {"unreg", &unreg}}) {
    Result r = timed_row(name, size, n, std::accumulate(lat->begin(), lat->end(), 0.0) / 1e6, *lat);
    r.bw_mbps = static_cast<double>(size) * static_cast<double>(n) / r.seconds / 1e6;  // bytes (un)registered
    r.msg_rate = static_cast<double>(n) / r.seconds;
    r.ms_per_gib = r.p50_us / 1e3 / gib;
    char note[64];
    std::snprintf(note, sizeof note, "%.4g ms/GiB", r.ms_per_gib);
    r.note = note;
    rows.push_back(r);
  }
  return rows;
}

// recovery: a server process is killed (SIGKILL) while connected; the client puts to it until a put
// fails with a typed hmc::Error other than TimeoutError, then starts a new server process (a new rank and port),
// connects and puts `size` bytes. Rows: recovery = the kill to that put's completion, rec_lost = the kill to the error,
// rec_conn = connect + first put to the new server. Every wait is bounded by 10 s.
std::vector<Result> measure_recovery(const Options& o, std::size_t size) {
  static std::uint32_t next_rank = kRecoveryRank;
  const long n = iterations(o, "recovery", size);
  SessionOptions so = session_options(o, true);
  so.timeout = kRecoveryTimeout;
  Session c(so);
  Reaper children;
  ServerProcess victim = spawn_server(o, next_rank++);
  children.pids.push_back(victim.pid);
  c.connect(victim.rank, o.rank, o.host, 0, victim.port, ConnType::UCX, kRecoveryTimeout);
  c.put(victim.rank, 0, 0, size);  // connected and moving data when it is killed
  std::vector<double> total, lost, reconnect;
  std::vector<std::string> seen;  // the statuses the loss surfaced as
  const auto start = clock_type::now();
  for (long i = 0; i < n; ++i) {
    const auto t0 = clock_type::now();
    ::kill(victim.pid, SIGKILL);
    for (;;) {  // the dead peer's loss must surface as a typed error, not a hang
      try {
        c.put(victim.rank, 0, 0, size);
      } catch (const TimeoutError&) {
        throw std::runtime_error("recovery: a put to the killed server timed out (10 s): its loss went unseen");
      } catch (const Error& e) {
        const std::string status(to_string(e.status()));
        if (std::find(seen.begin(), seen.end(), status) == seen.end()) seen.push_back(status);
        break;
      }
      if (clock_type::now() - t0 > kRecoveryTimeout)
        throw std::runtime_error("recovery: puts to the killed server still succeed after 10 s");
    }
    const auto t1 = clock_type::now();
    const ServerProcess next = spawn_server(o, next_rank++);
    children.pids.push_back(next.pid);
    const auto t2 = clock_type::now();
    c.connect(next.rank, o.rank, o.host, 0, next.port, ConnType::UCX, kRecoveryTimeout);
    c.put(next.rank, 0, 0, size);
    const auto t3 = clock_type::now();
    total.push_back(micros(t3 - t0));
    lost.push_back(micros(t1 - t0));
    reconnect.push_back(micros(t3 - t2));
    children.reap(victim.pid);
    victim = next;
  }
  const double secs = std::chrono::duration<double>(clock_type::now() - start).count();
  finish(c, o,
         c.async_ctrl_send(victim.rank, CtrlMessage::from_struct(TestSpec{kFinish, 0, 0, 0, 0}), asio::use_future));
  children.reap(victim.pid);
  std::string as = "loss seen as:";
  for (const auto& st : seen) as += (as.back() == ':' ? " " : ", ") + st;
  std::vector<Result> rows{timed_row("recovery", size, n, secs, total), timed_row("rec_lost", size, n, secs, lost),
                           timed_row("rec_conn", size, n, secs, reconnect)};
  rows[1].note = as;
  return rows;
}

// --------------------------------------------------------------------------------------- output
// A column that does not apply to a row (zero) reads "-".
std::string cell(double v, int decimals) {
  if (v == 0) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

void print_header() {
  std::printf("%-10s %8s %8s %12s %12s %10s %10s %10s %10s %10s %8s\n", "test", "size", "iters", "MB/s", "msg/s",
              "p50 us", "p99 us", "p99.9 us", "max us", "CPU s/GB", "CPU %");
}

void print_row(const Result& r) {
  std::printf("%-10s %8s %8ld %12s %12s %10.2f %10.2f %10.2f %10.2f %10s %8s%s%s\n", r.test.c_str(),
              human(r.size).c_str(), r.iters, cell(r.bw_mbps, 1).c_str(), cell(r.msg_rate, 0).c_str(), r.p50_us,
              r.p99_us, r.p999_us, r.max_us, cell(r.cpu_s_per_gb, 3).c_str(), cell(r.cpu_pct, 2).c_str(),
              r.note.empty() ? "" : "  ", r.note.c_str());
  std::fflush(stdout);
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
        << ", \"lat_p50_us\": " << r.p50_us << ", \"lat_p99_us\": " << r.p99_us << ", \"lat_p999_us\": " << r.p999_us
        << ", \"lat_max_us\": " << r.max_us << ", \"cpu_s_per_gb\": " << r.cpu_s_per_gb
        << ", \"cpu_pct\": " << r.cpu_pct;
      if (r.ms_per_gib > 0) f << ", \"ms_per_gib\": " << r.ms_per_gib;
      if (!r.note.empty()) f << ", \"note\": \"" << r.note << "\"";
      f << "}" << (i + 1 < rs.size() ? ",\n" : "\n");
    }
    f << " ]}\n";
  }
  if (!o.csv.empty()) {
    std::ofstream f(o.csv);
    f << "impl,tls,mode,test,size,depth,iters,seconds,bw_mbps,msg_rate,bw_p50_mbps,lat_p50_us,lat_p99_us,lat_p999_us,"
         "lat_max_us,cpu_s_per_gb,cpu_pct,ms_per_gib\n";
    for (const auto& r : rs)
      f << "hmc-cpp," << (o.tls.empty() ? "default" : o.tls) << "," << mode << "," << r.test << "," << r.size << ","
        << r.depth << "," << r.iters << "," << r.seconds << "," << r.bw_mbps << "," << r.msg_rate << ","
        << r.bw_p50_mbps << "," << r.p50_us << "," << r.p99_us << "," << r.p999_us << "," << r.max_us << ","
        << r.cpu_s_per_gb << "," << r.cpu_pct << "," << r.ms_per_gib << "\n";
  }
}

// --------------------------------------------------------------------------------------- client
int run_client(const Options& o, const std::vector<Peer>& servers) {
  Session s(session_options(o, true));
  for (const auto& p : servers) {
    // A server started with --port P serves data port P; loopback starts them with --port 0.
    s.connect(p.rank, o.rank, o.host, o.role == "client" ? p.port : 0, p.port);
  }
  if (!o.quiet)
    std::printf("hmc_bench: %s progress (progress thread: %s), UCX %s, depth %zu, %zu peer(s)\n",
                runtime::to_string(o.mode).data(), o.progress_thread_name.c_str(),
                s.transports(servers.front().rank).c_str(), o.depth, servers.size());
  std::vector<Result> results;
  if (!o.quiet) print_header();
  const std::size_t total = o.tests.size() * o.sizes.size();
  std::size_t done = 0;
  for (const auto& test : o.tests) {
    if (test == "recovery" && o.role != "loopback") {  // it kills the server: only one this run started
      std::fprintf(stderr, "hmc_bench: recovery needs --role loopback (it kills and restarts the server); skipped\n");
      done += o.sizes.size();
      continue;
    }
    for (std::size_t size : o.sizes) {
      if (!o.quiet)
        std::fprintf(stderr, "\r[%zu/%zu] %s %s ...      ", ++done, total, test.c_str(), human(size).c_str());
      std::vector<Result> rows;
      if (test == "cold") rows = measure_cold(s, servers.front(), o, size);
      else if (test == "reg") rows = measure_reg(s, o, size);
      else if (test == "recovery") rows = measure_recovery(o, size);
      else rows.push_back(measure(s, servers, o, test, size));
      if (!o.quiet) {
        std::fprintf(stderr, "\r%60s\r", "");
        for (const auto& r : rows) print_row(r);
      }
      results.insert(results.end(), rows.begin(), rows.end());
    }
  }
  for (const auto& p : servers)
    finish(s, o, s.async_ctrl_send(p.rank, CtrlMessage::from_struct(TestSpec{kFinish, 0, 0, 0, 0}), asio::use_future));
  write_outputs(o, results);
  return 0;
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
    std::vector<ServerProcess> servers;
    Reaper children;  // killed if the client fails
    for (std::uint32_t i = 0; i < o.peers; ++i) {
      servers.push_back(spawn_server(o, 100 + i));
      children.pids.push_back(servers.back().pid);
    }
    std::vector<Peer> peers;
    for (const auto& p : servers) peers.push_back({p.rank, p.port});
    const int rc = run_client(o, peers);
    for (const auto& p : servers) children.reap(p.pid);  // they exit on the client's finish
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hmc_bench: %s\n", e.what());
    return 1;
  }
}
