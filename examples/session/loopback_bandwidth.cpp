// HMC's main demo: two Sessions on loopback, a verified transfer, then put and get bandwidth with
// `depth` operations in flight, for each UCX transport asked for.
//   hmc_loopback [size=1048576] [iterations=2000] [depth=16] [transports=shm,tcp] [mode=event]
// Prints one "RESULT ..." line per measurement for scripts (scripts/demo compares with ucx_perftest).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "hmc/error.hpp"
#include "hmc/session.hpp"

namespace asio = hmc::runtime::asio;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

struct Config {
  std::size_t size = 1u << 20;
  long iterations = 2000;
  std::size_t depth = 16;
  std::vector<std::string> transports{"shm", "tcp"};
  hmc::runtime::ProgressMode mode = hmc::runtime::ProgressMode::event;
};

// `depth` coroutines, each with one operation in flight, on the application's own io_context.
double measure(hmc::Session& client, bool put, const Config& c) {
  asio::io_context io;
  const long per_lane = c.iterations / static_cast<long>(c.depth);
  const auto t0 = clock_type::now();
  std::vector<std::future<void>> lanes;
  for (std::size_t lane = 0; lane < c.depth; ++lane) {
    lanes.push_back(asio::co_spawn(
        io,
        [&, lane]() -> asio::awaitable<void> {
          const std::size_t off = lane * c.size;
          for (long i = 0; i < per_lane; ++i) {
            if (put) co_await client.async_put(0, off, off, c.size, asio::use_awaitable);
            else co_await client.async_get(0, off, off, c.size, asio::use_awaitable);
          }
        },
        asio::use_future));
  }
  io.run();
  for (auto& l : lanes) l.get();
  const double secs = std::chrono::duration<double>(clock_type::now() - t0).count();
  return static_cast<double>(per_lane) * static_cast<double>(c.depth) * static_cast<double>(c.size) / secs / 1e6;
}

bool run_transport(const std::string& tls, const Config& c) {
  hmc::SessionOptions o;
  o.buffer_size = std::max<std::size_t>(c.depth * c.size, 1u << 20);
  o.ucx_tls = tls;
  o.ucx_net_devices = "lo";  // loopback only
  o.progress_mode = c.mode;
  hmc::Session server(o), client(o);
  server.init_server("127.0.0.1", 1, 0, 0, 0);
  client.connect(0, 1, "127.0.0.1", 1, server.ctrl_port());
  std::printf("[%s] connected over UCX %s (%s progress)\n", tls.c_str(), client.transports(0).c_str(),
              hmc::runtime::to_string(c.mode).data());

  // A verified transfer first: what a user does before trusting any number.
  std::vector<unsigned char> bytes(c.size);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 131 + 17);
  client.buffer().write_from_cpu(bytes.data(), bytes.size(), 0);
  client.put(0, 0, 0, c.size);
  std::vector<unsigned char> seen(c.size);
  server.buffer().read_to_cpu(seen.data(), seen.size(), 0);
  if (seen != bytes) {
    std::printf("[%s] verification FAILED: the server's buffer differs after put\n", tls.c_str());
    return false;
  }
  std::printf("[%s] verified a %zu-byte put byte for byte\n", tls.c_str(), c.size);
  std::fflush(stdout);

  Config warm = c;
  warm.iterations = static_cast<long>(c.depth) * 8;
  measure(client, true, warm);
  for (bool put : {true, false}) {
    const double mbps = measure(client, put, c);
    std::printf("[%s] %-3s %zu B x %ld, depth %zu: %.1f MB/s\n", tls.c_str(), put ? "put" : "get", c.size, c.iterations,
                c.depth, mbps);
    std::printf("RESULT transport=%s op=%s size=%zu depth=%zu mbps=%.1f\n", tls.c_str(), put ? "put" : "get", c.size,
                c.depth, mbps);
    std::fflush(stdout);
  }
  return true;
}

int main(int argc, char** argv) {
  Config c;
  if (argc > 1) c.size = std::strtoull(argv[1], nullptr, 10);
  if (argc > 2) c.iterations = std::atol(argv[2]);
  if (argc > 3) c.depth = std::strtoull(argv[3], nullptr, 10);
  if (argc > 4) {
    c.transports.clear();
    std::stringstream list(argv[4]);
    for (std::string t; std::getline(list, t, ',');) c.transports.push_back(t);
  }
  if (argc > 5) {
    auto m = hmc::runtime::parse_progress_mode(argv[5]);
    if (!m) {
      std::fprintf(stderr, "mode must be adaptive, event or poll\n");
      return 2;
    }
    c.mode = *m;
  }
  if (c.size == 0 || c.depth == 0 || c.iterations < static_cast<long>(c.depth)) {
    std::fprintf(stderr, "usage: %s [size>0] [iterations>=depth] [depth>0] [transports] [mode]\n", argv[0]);
    return 2;
  }
  try {
    bool ok = true;
    for (const auto& t : c.transports) ok = run_transport(t, c) && ok;
    return ok ? 0 : 1;
  } catch (const hmc::Error& e) {
    std::fprintf(stderr, "hmc_loopback: %s\n", e.what());
    return 1;
  }
}
