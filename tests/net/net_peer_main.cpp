// A Session peer for the network-fault, scale and soak tests, driven by one command per stdin line.
//   hmc_net_peer server|client [--tls T] [--net-devices D] [--local-ip IP] [--bind IP] [--port P]
//                [--data-port P] [--rank R] [--slot BYTES] [--ranks N] [--timeout-ms T]
//                [--heartbeat-ms H --heartbeat-misses M] [--ctrl auto|tcp|uds] [--uds-dir DIR]
//                [--mode event|poll] [--max-seconds S]
// Every answer is one stdout line; times marked "at=" are CLOCK_MONOTONIC milliseconds (the
// driver's time.monotonic() * 1000), so the driver can relate them to the faults it injected.
//
// A round (client `rounds` / `soak`): the client writes pattern(put seed) to its buffer, puts it into
// its own slot of the server's buffer (put, put_batch or put_pipeline by round), sends the tag
// (size << 32 | round); the server checks every byte against the pattern, writes pattern(reply seed)
// into the second half of the slot and echoes the tag; the client gets that half (get or
// get_pipeline) and checks every byte. Any mismatch is reported, never retried.
//
// Commands (both roles): flood PEER INFLIGHT MS SIZE rw|pipe [WARM] | idle MS | stats | quit
//   server: serve FIRST LAST TIMEOUT_MS (start serving client ranks FIRST..LAST) | counts
//   client: connect PEER SELF IP CTRL_PORT DATA_PORT | rounds PEER N SIZES | soak PEER MS SIZES |
//           until_lost PEER MAX_MS | reset | disconnect PEER          (SIZES: comma separated)
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "../session/session_test_util.hpp"
#include "hmc/error.hpp"

namespace {

namespace asio = hmc::runtime::asio;
using namespace std::chrono_literals;
using ms = std::chrono::milliseconds;

std::mutex out_mutex;

// One whole line per call, flushed: lines from the loop thread and the command thread never mix.
[[gnu::format(printf, 1, 2)]] void say(const char* fmt, ...) {
  std::lock_guard lock(out_mutex);
  va_list args;
  va_start(args, fmt);
  std::vprintf(fmt, args);
  va_end(args);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

long long mono_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

long long since_ms(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<ms>(std::chrono::steady_clock::now() - t0).count();
}

// The enumerator's name: the driver matches on these.
std::string name_of(hmc::Status s) {
  using enum hmc::Status;
  switch (s) {
    case SUCCESS: return "SUCCESS";
    case ERROR: return "ERROR";
    case UNSUPPORT: return "UNSUPPORT";
    case INVALID_CONFIG: return "INVALID_CONFIG";
    case TIMEOUT: return "TIMEOUT";
    case NOT_FOUND: return "NOT_FOUND";
    case INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case OUT_OF_RANGE: return "OUT_OF_RANGE";
    case NOT_CONNECTED: return "NOT_CONNECTED";
    case PEER_LOST: return "PEER_LOST";
    case PROTOCOL_ERROR: return "PROTOCOL_ERROR";
    case CANCELLED: return "CANCELLED";
    case CLOSED: return "CLOSED";
    case AUTH_FAILED: return "AUTH_FAILED";
    default: return "STATUS_" + std::to_string(static_cast<int>(s));  // one added after this list
  }
}

std::string status_name(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const hmc::Error& err) {
    return name_of(err.status());
  } catch (...) {
    return "UNTYPED";
  }
}

std::string message_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& err) {
    return err.what();
  } catch (...) {
    return "unknown exception";
  }
}

std::string join_counts(const std::map<std::string, long>& m) {
  std::string s;
  for (const auto& [k, v] : m) s += (s.empty() ? "" : ",") + k + ":" + std::to_string(v);
  return s.empty() ? "-" : s;
}

struct Args {
  std::string role;
  std::string tls, net_devices, local_ip = "127.0.0.1", bind_ip = "127.0.0.1", uds_dir = "/tmp", ctrl = "auto";
  std::string mode = "event";
  std::string progress_thread;  // own, shared or caller; empty: SessionOptions' default
  std::uint16_t port = 0;
  std::uint16_t data_port = 18515;  // the server's (ip, data_port) name; connect must name it right
  std::uint32_t rank = 0;           // server: its own rank
  std::size_t slot = 256u << 10;    // per client: half for its puts, half for the server's replies
  std::uint32_t ranks = 64;         // server: client ranks 1..ranks have a slot
  long timeout_ms = 5000;
  long heartbeat_ms = 0;
  unsigned heartbeat_misses = 0;
  long max_seconds = 300;
};

Args parse(int argc, char** argv) {
  Args a;
  if (argc < 2) throw hmc::InvalidArgumentError("usage: hmc_net_peer server|client [options]");
  a.role = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--tls") a.tls = v == "default" ? "" : v;
    else if (k == "--net-devices") a.net_devices = v == "default" ? "" : v;
    else if (k == "--local-ip") a.local_ip = v;
    else if (k == "--bind") a.bind_ip = v;
    else if (k == "--port") a.port = static_cast<std::uint16_t>(std::stoul(v));
    else if (k == "--data-port") a.data_port = static_cast<std::uint16_t>(std::stoul(v));
    else if (k == "--rank") a.rank = static_cast<std::uint32_t>(std::stoul(v));
    else if (k == "--slot") a.slot = std::stoull(v);
    else if (k == "--ranks") a.ranks = static_cast<std::uint32_t>(std::stoul(v));
    else if (k == "--timeout-ms") a.timeout_ms = std::stol(v);
    else if (k == "--heartbeat-ms") a.heartbeat_ms = std::stol(v);
    else if (k == "--heartbeat-misses") a.heartbeat_misses = static_cast<unsigned>(std::stoul(v));
    else if (k == "--ctrl") a.ctrl = v;
    else if (k == "--uds-dir") a.uds_dir = v;
    else if (k == "--mode") a.mode = v;
    else if (k == "--progress-thread") a.progress_thread = v;
    else if (k == "--max-seconds") a.max_seconds = std::stol(v);
    else throw hmc::InvalidArgumentError("unknown option " + k);
  }
  return a;
}

hmc::SessionOptions session_options(const Args& a, std::size_t buffer) {
  hmc::SessionOptions o;
  o.buffer_size = buffer;
  o.local_ip = a.local_ip;
  o.ucx_tls = a.tls;
  o.ucx_net_devices = a.net_devices;
  o.timeout = ms(a.timeout_ms);
  o.progress_mode = a.mode == "poll" ? hmc::runtime::ProgressMode::poll : hmc::runtime::ProgressMode::event;
  if (a.progress_thread == "own") o.progress_thread = hmc::ProgressThread::own;
  else if (a.progress_thread == "shared") o.progress_thread = hmc::ProgressThread::shared;
  else if (a.progress_thread == "caller") o.progress_thread = hmc::ProgressThread::caller;
  else if (!a.progress_thread.empty()) throw hmc::InvalidArgumentError("--progress-thread own|shared|caller");
  o.ctrl.uds_dir = a.uds_dir;
  o.ctrl.transport = a.ctrl == "tcp"   ? hmc::CtrlTransport::tcp
                     : a.ctrl == "uds" ? hmc::CtrlTransport::uds
                                       : hmc::CtrlTransport::automatic;
  if (a.heartbeat_ms > 0) {
    o.ctrl.heartbeat_interval = ms(a.heartbeat_ms);
    o.ctrl.heartbeat_misses = a.heartbeat_misses;
  }
  return o;
}

std::uint64_t seed_of(std::uint32_t client, std::uint64_t round, std::uint64_t half) {
  return (std::uint64_t{client} << 40) ^ (round << 2) ^ half;
}

// The first byte where the region differs from pattern(seed), or -1 when all n bytes match.
long long first_mismatch(const hmc::ConnBuffer& b, std::size_t offset, std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> got(n);
  b.read_to_cpu(got.data(), n, offset);
  const auto want = hmc::test::pattern(n, seed);
  for (std::size_t i = 0; i < n; ++i)
    if (got[i] != want[i]) return static_cast<long long>(i);
  return -1;
}

std::vector<std::size_t> parse_sizes(const std::string& s) {
  std::vector<std::size_t> v;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) v.push_back(std::stoull(item));
  if (v.empty()) throw hmc::InvalidArgumentError("no sizes");
  return v;
}

// RSS split as the kernel counts it: heap growth shows in anon, mappings of peers' shared memory
// that were never released in shmem.
void print_stats(const char* what) {
  std::map<std::string, long> v;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    const auto colon = line.find(':');
    for (const char* key : {"VmRSS", "RssAnon", "RssShmem", "Threads"})
      if (line.compare(0, colon, key) == 0) v[key] = std::stol(line.substr(colon + 1));
  }
  long fds = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++fds;
  long maps = 0;
  std::ifstream mapping("/proc/self/maps");
  for (std::string line; std::getline(mapping, line);) ++maps;
  say("%s rss_kb=%ld anon_kb=%ld shmem_kb=%ld fds=%ld threads=%ld maps=%ld", what, v["VmRSS"], v["RssAnon"],
      v["RssShmem"], fds - 1, v["Threads"], maps);  // fds less the iterator's own
}

// CPU time this process burns while it has nothing to do: a spinning loop shows up here.
void idle(long wall_ms) {
  const auto cpu = [] {
    rusage ru{};
    ::getrusage(RUSAGE_SELF, &ru);
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000L + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000L;
  };
  const long before = cpu();
  std::this_thread::sleep_for(ms(wall_ms));
  say("IDLE cpu_ms=%ld wall_ms=%ld", cpu() - before, wall_ms);
}

// Keeps `inflight` puts and gets (pipelined in 64 KiB chunks, window 4, when `pipe`) in flight to
// `peer` for `run_ms`, or until the first error; then issues nothing more and waits for every
// operation to reach an end. "FLOODING" says `warm` operations have completed (the time to strike).
// Proves each op gets a typed result within the session timeout, whatever happens to the peer.
void flood(hmc::Session& s, std::uint32_t peer, int inflight, long run_ms, std::size_t size, bool pipe, long warm,
           std::size_t local_off, std::size_t remote_off) {
  struct State {
    std::mutex m;
    std::condition_variable cv;
    int outstanding = 0;
    long ok = 0, err = 0;
    bool stop = false;
    long long first_err_at = -1, max_err_latency = 0;
    std::map<std::string, long> statuses;
    std::string first_what;
  };
  auto st = std::make_shared<State>();
  auto issue = std::make_shared<std::function<void(bool)>>();
  *issue = [&s, st, issue_weak = std::weak_ptr<std::function<void(bool)>>(issue), peer, size, pipe, local_off,
            remote_off](bool is_put) {
    const auto t0 = std::chrono::steady_clock::now();
    auto done = [st, issue_weak, is_put, t0](std::exception_ptr e) {
      std::unique_lock lock(st->m);
      --st->outstanding;
      if (!e) {
        ++st->ok;
      } else {
        ++st->err;
        st->stop = true;
        ++st->statuses[status_name(e)];
        st->max_err_latency = std::max(st->max_err_latency, since_ms(t0));
        if (st->first_err_at < 0) st->first_err_at = mono_ms(), st->first_what = message_of(e);
      }
      const bool again = !st->stop;
      if (again) ++st->outstanding;
      st->cv.notify_all();
      lock.unlock();
      if (again)
        if (auto f = issue_weak.lock()) (*f)(!is_put);
    };
    constexpr std::size_t chunk = 64u << 10, window = 4;
    if (pipe && is_put) s.async_put_pipeline(peer, local_off, remote_off, size, chunk, window, std::move(done));
    else if (pipe) s.async_get_pipeline(peer, local_off, remote_off, size, chunk, window, std::move(done));
    else if (is_put) s.async_put(peer, local_off, remote_off, size, std::move(done));
    else s.async_get(peer, local_off, remote_off, size, std::move(done));
  };
  {
    std::lock_guard lock(st->m);
    st->outstanding = inflight;
  }
  for (int i = 0; i < inflight; ++i) (*issue)(i % 2 == 0);
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock lock(st->m);
  // The driver injects its fault once the flood is known to be running.
  st->cv.wait_for(lock, 10s, [&] { return st->ok >= warm || st->stop; });
  say("FLOODING ok=%ld", st->ok);
  st->cv.wait_until(lock, t0 + ms(run_ms), [&] { return st->stop; });
  st->stop = true;
  const auto limit = s.options().timeout + 5s;
  const bool ended = st->cv.wait_for(lock, limit, [&] { return st->outstanding == 0; });
  say("FLOOD ok=%ld err=%ld statuses=%s first_err_at=%lld max_err_latency_ms=%lld unfinished=%d | %s", st->ok, st->err,
      join_counts(st->statuses).c_str(), st->first_err_at, st->max_err_latency, ended ? 0 : st->outstanding,
      st->first_what.empty() ? "-" : st->first_what.c_str());
  // An op that ends after this still finds `st` (it holds it) and issues nothing (stop is set).
}

class Server {
 public:
  explicit Server(const Args& a) : a_(a), s_(session_options(a, std::size_t{a.ranks + 1} * a.slot)) {
    s_.init_server(a.bind_ip, a.data_port, 0, a.port, a.rank, a.uds_dir);
    say("READY %u %u", s_.ctrl_port(), a.data_port);
  }

  void serve(std::uint32_t first, std::uint32_t last, long timeout_ms) {
    const auto t0 = std::chrono::steady_clock::now();
    for (std::uint32_t r = first; r <= last; ++r) {
      const long long left = timeout_ms - since_ms(t0);
      try {
        s_.wait_peer(r, ms(std::max(left, 1LL)));
      } catch (const hmc::Error& e) {
        say("ERR serve rank=%u status=%s | %s", r, name_of(e.status()).c_str(), e.what());
        return;
      }
      ++serving_;
      asio::co_spawn(s_.executor(), serve_one(r), [this, r](std::exception_ptr e) {
        if (e) say("LOST %u status=%s at=%lld | %s", r, status_name(e).c_str(), mono_ms(), message_of(e).c_str());
        --serving_;
      });
    }
    say("SERVING %u..%u ms=%lld", first, last, since_ms(t0));
  }

  void command(std::istringstream& in, const std::string& cmd) {
    if (cmd == "serve") {
      std::uint32_t first = 0, last = 0;
      long timeout_ms = 0;
      in >> first >> last >> timeout_ms;
      serve(first, last, timeout_ms);
    } else if (cmd == "flood") {
      std::uint32_t peer = 0;
      int inflight = 0;
      long run_ms = 0;
      std::size_t size = 0;
      std::string kinds;
      long warm = 100;
      in >> peer >> inflight >> run_ms >> size >> kinds >> warm;
      flood(s_, peer, inflight, run_ms, size, kinds == "pipe", warm, peer * a_.slot, 0);
    } else if (cmd == "counts") {
      say("COUNTS rounds=%ld bytes=%ld bad=%ld", rounds_.load(), bytes_.load(), bad_.load());
    } else {
      say("ERR command | unknown: %s", cmd.c_str());
    }
  }

  // Closes first so the serving coroutines end (ClosedError) before the session is destroyed.
  void close() {
    s_.close();
    for (int i = 0; i < 500 && serving_ > 0; ++i) std::this_thread::sleep_for(10ms);
  }

 private:
  asio::awaitable<void> serve_one(std::uint32_t rank) {
    const std::size_t half = a_.slot / 2, base = rank * a_.slot;
    for (;;) {
      hmc::CtrlMessage m;
      try {
        m = co_await s_.async_ctrl_recv(rank, 1h, asio::use_awaitable);
      } catch (const hmc::TimeoutError&) {
        continue;  // an idle client is not a lost one
      }
      const std::uint64_t tag = m.tag();
      const std::size_t size = tag >> 32;
      const std::uint64_t round = tag & 0xffffffffu;
      if (size == 0 || size > half) {
        ++bad_;
        say("BAD %u round=%llu size=%zu out of the slot", rank, static_cast<unsigned long long>(round), size);
        co_return;
      }
      const long long at = first_mismatch(s_.buffer(), base, size, seed_of(rank, round, 1));
      if (at >= 0) {
        ++bad_;
        say("BAD %u round=%llu size=%zu first_bad_byte=%lld", rank, static_cast<unsigned long long>(round), size, at);
      } else {
        ++rounds_;
        bytes_ += static_cast<long>(size);
      }
      hmc::test::fill(s_.buffer(), base + half, size, seed_of(rank, round, 2));
      co_await s_.async_ctrl_send(rank, hmc::CtrlMessage::from_tag(tag), asio::use_awaitable);
    }
  }

  const Args& a_;
  hmc::Session s_;
  std::atomic<int> serving_{0};
  std::atomic<long> rounds_{0}, bytes_{0}, bad_{0};
};

class Client {
 public:
  explicit Client(const Args& a) : a_(a) { reset(); }

  void reset() {
    s_.reset();
    s_ = std::make_unique<hmc::Session>(session_options(a_, a_.slot));
    say("READY 0");
  }

  void command(std::istringstream& in, const std::string& cmd) {
    if (cmd == "connect") {
      std::uint32_t peer = 0;
      std::string ip;
      unsigned ctrl_port = 0, data_port = 0;
      in >> peer >> self_ >> ip >> ctrl_port >> data_port;
      const auto t0 = std::chrono::steady_clock::now();
      try {
        s_->connect(peer, self_, ip, static_cast<std::uint16_t>(data_port), static_cast<std::uint16_t>(ctrl_port));
        say("CONNECTED %u ms=%lld tls=%s", peer, since_ms(t0), s_->transports(peer).c_str());
      } catch (const hmc::Error& e) {
        say("ERR connect status=%s ms=%lld | %s", name_of(e.status()).c_str(), since_ms(t0), e.what());
      }
    } else if (cmd == "rounds" || cmd == "soak") {
      std::uint32_t peer = 0;
      long n = 0;
      std::string sizes;
      in >> peer >> n >> sizes;
      rounds(peer, cmd == "rounds" ? n : -1, cmd == "soak" ? n : 0, parse_sizes(sizes));
    } else if (cmd == "until_lost") {
      std::uint32_t peer = 0;
      long max_ms = 0;
      in >> peer >> max_ms;
      until_lost(peer, max_ms);
    } else if (cmd == "flood") {
      std::uint32_t peer = 0;
      int inflight = 0;
      long run_ms = 0;
      std::size_t size = 0;
      std::string kinds;
      long warm = 100;
      in >> peer >> inflight >> run_ms >> size >> kinds >> warm;
      flood(*s_, peer, inflight, run_ms, size, kinds == "pipe", warm, 0, self_ * a_.slot);
    } else if (cmd == "disconnect") {
      std::uint32_t peer = 0;
      in >> peer;
      s_->disconnect(peer);
      say("OK disconnect");
    } else if (cmd == "reset") {
      reset();
    } else {
      say("ERR command | unknown: %s", cmd.c_str());
    }
  }

  void close() { s_.reset(); }

 private:
  // n rounds (n >= 0), or rounds until run_ms has passed.
  void rounds(std::uint32_t peer, long n, long run_ms, const std::vector<std::size_t>& sizes) {
    const std::size_t half = a_.slot / 2, base = self_ * a_.slot;
    const auto t0 = std::chrono::steady_clock::now();
    long done = 0;
    long long bytes = 0;
    for (; n >= 0 ? done < n : since_ms(t0) < run_ms; ++done) {
      const std::uint64_t round = next_round_++;
      const std::size_t size = std::min(sizes[static_cast<std::size_t>(done) % sizes.size()], half);
      const std::uint64_t tag = (std::uint64_t{size} << 32) | (round & 0xffffffffu);
      try {
        hmc::test::fill(s_->buffer(), 0, size, seed_of(self_, round, 1));
        switch (round % 3) {
          case 0: s_->put(peer, 0, base, size); break;
          case 1: {
            const std::size_t a = size / 3, b = size / 3;  // three segments, the last one takes the rest
            std::vector<hmc::Segment> segs{{0, base, a}, {a, base + a, b}, {a + b, base + a + b, size - a - b}};
            std::erase_if(segs, [](const hmc::Segment& g) { return g.size == 0; });
            s_->put_batch(peer, segs);
            break;
          }
          default: s_->put_pipeline(peer, 0, base, size, 16u << 10, 4); break;
        }
        s_->ctrl_send(peer, tag);
        const std::uint64_t ack = s_->ctrl_recv(peer, ms(a_.timeout_ms));
        if (ack != tag) {
          say("ERR rounds status=PROTOCOL_ERROR round=%llu at=%lld | ack %llu for tag %llu",
              static_cast<unsigned long long>(round), mono_ms(), static_cast<unsigned long long>(ack),
              static_cast<unsigned long long>(tag));
          return;
        }
        if (round % 3 == 2) s_->get_pipeline(peer, half, base + half, size, 16u << 10, 4);
        else s_->get(peer, half, base + half, size);
        if (const long long at = first_mismatch(s_->buffer(), half, size, seed_of(self_, round, 2)); at >= 0) {
          say("ERR rounds status=CORRUPT round=%llu at=%lld size=%zu first_bad_byte=%lld",
              static_cast<unsigned long long>(round), mono_ms(), size, at);
          return;
        }
        bytes += static_cast<long long>(2 * size);
      } catch (const hmc::Error& e) {
        say("ERR rounds status=%s round=%llu at=%lld done=%ld | %s", name_of(e.status()).c_str(),
            static_cast<unsigned long long>(round), mono_ms(), done, e.what());
        return;
      }
    }
    say("OK rounds n=%ld bytes=%lld ms=%lld", done, bytes, since_ms(t0));
  }

  // After a partition: small puts until the peer is declared lost (or max_ms), each error typed.
  void until_lost(std::uint32_t peer, long max_ms) {
    const auto t0 = std::chrono::steady_clock::now();
    std::map<std::string, long> seen;
    while (since_ms(t0) < max_ms) {
      const auto t1 = std::chrono::steady_clock::now();
      try {
        s_->put(peer, 0, self_ * a_.slot, 64);
        ++seen["OK"];
        std::this_thread::sleep_for(50ms);
      } catch (const hmc::Error& e) {
        const std::string st = name_of(e.status());
        ++seen[st];
        if (e.status() != hmc::Status::TIMEOUT) {
          say("LOSTAT status=%s at=%lld op_ms=%lld seen=%s | %s", st.c_str(), mono_ms(), since_ms(t1),
              join_counts(seen).c_str(), e.what());
          return;
        }
      }
    }
    say("ERR until_lost status=NEVER_LOST seen=%s | after %ld ms", join_counts(seen).c_str(), max_ms);
  }

  const Args& a_;
  std::unique_ptr<hmc::Session> s_;
  std::uint32_t self_ = 1;
  std::uint64_t next_round_ = 0;
};

template <class Role>
int run(const Args& a) {
  Role role(a);
  for (std::string line; std::getline(std::cin, line);) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd.empty()) continue;
    if (cmd == "quit") break;
    if (cmd == "idle") {
      long wall = 0;
      in >> wall;
      idle(wall);
    } else if (cmd == "stats") {
      print_stats("STATS");
    } else {
      role.command(in, cmd);
    }
  }
  role.close();
  say("BYE");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Never outlive the test driver, nor a test that forgot to stop us.
  const pid_t parent = ::getppid();
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) return 3;
  try {
    const Args a = parse(argc, argv);
    ::alarm(static_cast<unsigned>(a.max_seconds));
    if (a.role == "server") return run<Server>(a);
    if (a.role == "client") return run<Client>(a);
    throw hmc::InvalidArgumentError("role must be server or client");
  } catch (const std::exception& e) {
    say("ERR start | %s", e.what());
    return 2;
  }
}
