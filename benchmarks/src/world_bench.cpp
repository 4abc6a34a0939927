// hmc_world_bench: the collectives of a world of processes on this host, timed as
// benchmarks/python/world_bench.py times them (the gloo comparison runs that script):
//   hmc_world_bench --ranks 8 --sizes 1K:16M --tests barrier,all_gather,all_to_all --tls shm --json out.json
// Starts the ranks as processes of itself; rank 0 prints one JSON array of results. One
// measurement: a barrier, ITERS operations back to back, each rank's mean time per operation; the
// slowest rank's mean is reported. all_gather: SIZE bytes from each rank; all_to_all: SIZE bytes
// sent by each rank in total (SIZE / ranks to each).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "hmc/error.hpp"
#include "hmc/world/world.hpp"

extern char** environ;

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

struct Args {
  std::uint32_t ranks = 4;
  std::vector<std::size_t> sizes;
  std::vector<std::string> tests{"barrier", "all_gather", "all_to_all"};
  std::string tls = "shm";
  std::size_t buffer = std::size_t{256} << 20;
  double iter_scale = 1.0;
  std::string json, url, mode = "event";
  long rank = -1;  // >= 0: this process is that rank
};

std::size_t parse_size(const std::string& t) {
  std::size_t pos = 0;
  const std::size_t n = std::stoull(t, &pos);
  const std::string unit = t.substr(pos);
  if (unit.empty() || unit == "B") return n;
  if (unit == "K" || unit == "KiB") return n << 10;
  if (unit == "M" || unit == "MiB") return n << 20;
  if (unit == "G" || unit == "GiB") return n << 30;
  throw std::invalid_argument("size '" + t + "': use a number with K, M or G");
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const auto comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<std::size_t> parse_sizes(const std::string& v) {
  std::vector<std::size_t> out;
  if (const auto colon = v.find(':'); colon != std::string::npos) {
    for (std::size_t s = parse_size(v.substr(0, colon)), end = parse_size(v.substr(colon + 1)); s <= end; s *= 2)
      out.push_back(s);
  } else {
    for (const auto& s : split(v)) out.push_back(parse_size(s));
  }
  return out;
}

Args parse(int argc, char** argv) {
  Args a;
  a.sizes = parse_sizes("1K:16M");
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(k + " needs a value");
      return argv[++i];
    };
    if (k == "--ranks") a.ranks = static_cast<std::uint32_t>(std::stoul(value()));
    else if (k == "--sizes") a.sizes = parse_sizes(value());
    else if (k == "--tests") a.tests = split(value());
    else if (k == "--tls") a.tls = value();
    else if (k == "--buffer") a.buffer = parse_size(value());
    else if (k == "--iter-scale") a.iter_scale = std::stod(value());
    else if (k == "--mode") a.mode = value();
    else if (k == "--json") a.json = value();
    else if (k == "--rank") a.rank = std::stol(value());
    else if (k == "--url") a.url = value();
    else throw std::invalid_argument("unknown flag " + k + " (see the comment at the top of world_bench.cpp)");
  }
  return a;
}

long iters_for(const std::string& test, std::size_t size, double scale) {
  const long n = test == "barrier"
                     ? 2000
                     : std::clamp<long>(static_cast<long>((256u << 20) / std::max<std::size_t>(size, 1) / 4), 5, 1000);
  return std::max<long>(3, static_cast<long>(static_cast<double>(n) * scale));
}

int run_rank(const Args& a) {
  hmc::WorldOptions o;
  o.session.buffer_size = a.buffer;
  o.session.ucx_tls = a.tls;
  o.session.ucx_net_devices = "lo";
  o.session.progress_mode = *hmc::runtime::parse_progress_mode(a.mode);
  o.session.timeout = 120s;
  o.timeout = 120s;
  o.store.timeout = 60s;
  hmc::World w(a.url, a.ranks, static_cast<std::uint32_t>(a.rank), o);
  const std::uint32_t n = w.size();
  std::string json = "[";
  for (const auto& test : a.tests) {
    const std::vector<std::size_t> sizes = test == "barrier" ? std::vector<std::size_t>{0} : a.sizes;
    for (const std::size_t size : sizes) {
      const std::size_t bytes = test == "all_to_all" ? std::max<std::size_t>(size - size % n, n) : size;
      std::vector<std::byte> in(bytes, std::byte{static_cast<unsigned char>(w.rank())});
      std::vector<std::byte> out(test == "all_gather" ? bytes * n : bytes);
      auto op = [&] {
        if (test == "barrier") w.barrier();
        else if (test == "all_gather") w.all_gather(in, out);
        else if (test == "all_to_all") w.all_to_all(in, out);
        else throw std::invalid_argument("unknown test " + test);
      };
      const long iters = iters_for(test, size, a.iter_scale);
      for (long i = 0; i < std::max<long>(2, iters / 10); ++i) op();
      w.barrier();
      const auto t0 = clock_type::now();
      for (long i = 0; i < iters; ++i) op();
      const double mean = std::chrono::duration<double>(clock_type::now() - t0).count() / static_cast<double>(iters);
      std::vector<double> all(n);
      w.all_gather(std::as_bytes(std::span(&mean, 1)), std::as_writable_bytes(std::span(all)));
      const double slowest = *std::max_element(all.begin(), all.end());
      if (w.rank() == 0) {
        char line[256];
        std::snprintf(line, sizeof line,
                      "%s{\"impl\": \"hmc-cpp\", \"test\": \"%s\", \"ranks\": %u, \"size\": %zu, \"iters\": %ld, "
                      "\"time_us\": %.3f, \"bw_mbps\": %.3f}",
                      json.size() > 1 ? ", " : "", test.c_str(), n, size, iters, slowest * 1e6,
                      size ? static_cast<double>(size) / slowest / 1e6 : 0.0);
        json += line;
        std::fprintf(stderr, "hmc-cpp %-10s ranks=%u size=%9zu %12.1f us\n", test.c_str(), n, size, slowest * 1e6);
      }
    }
  }
  w.barrier();
  if (w.rank() == 0) std::printf("%s]\n", json.c_str());
  return 0;
}

// A port nothing listens on right now (bound, read, released).
std::uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw std::runtime_error("no free port");
  ::close(fd);
  return ntohs(addr.sin_port);
}

int run_all(Args a, const char* self) {
  a.url = "tcp://127.0.0.1:" + std::to_string(free_port());  // rank 0 hosts the store there
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe");
  std::vector<pid_t> pids;
  for (std::uint32_t r = 0; r < a.ranks; ++r) {
    std::vector<std::string> argv{self,
                                  "--rank",
                                  std::to_string(r),
                                  "--url",
                                  a.url,
                                  "--ranks",
                                  std::to_string(a.ranks),
                                  "--tls",
                                  a.tls,
                                  "--buffer",
                                  std::to_string(a.buffer),
                                  "--iter-scale",
                                  std::to_string(a.iter_scale),
                                  "--mode",
                                  a.mode,
                                  "--sizes",
                                  ""};
    for (auto s : a.sizes) argv.back() += (argv.back().empty() ? "" : ",") + std::to_string(s);
    argv.push_back("--tests");
    argv.push_back("");
    for (const auto& t : a.tests) argv.back() += (argv.back().empty() ? "" : ",") + t;
    std::vector<char*> args;
    for (auto& s : argv) args.push_back(s.data());
    args.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    if (r == 0) posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    pid_t pid = -1;
    if (::posix_spawn(&pid, self, &actions, nullptr, args.data(), environ) != 0) throw std::runtime_error("spawn");
    posix_spawn_file_actions_destroy(&actions);
    pids.push_back(pid);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int failed = 0;
  for (auto pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  if (failed != 0) throw std::runtime_error(std::to_string(failed) + " ranks failed");
  if (!a.json.empty()) {
    FILE* f = std::fopen(a.json.c_str(), "w");
    if (f == nullptr) throw std::runtime_error("cannot write " + a.json);
    std::fputs(out.c_str(), f);
    std::fclose(f);
  } else {
    std::fputs(out.c_str(), stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    ::setenv("HMC_AUTH_KEY", std::getenv("HMC_AUTH_KEY") ? std::getenv("HMC_AUTH_KEY") : "world-bench-auth-key", 0);
    const Args a = parse(argc, argv);
    return a.rank >= 0 ? run_rank(a) : run_all(a, "/proc/self/exe");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hmc_world_bench: %s\n", e.what());
    return 1;
  }
}
