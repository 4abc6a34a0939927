// A real Session server for the hostile-peer suite, in its own process so that its memory and fds
// can be measured and a crash cannot hide.
//   hmc_hostile_server <max_connections> <max_handshakes> <hello_timeout_ms> <log_file>
// Key from HMC_AUTH_KEY. Prints "PORT <port>" once listening. Serves every peer that connects:
// for each tag t it checks that its buffer holds pattern(t) at 0 and answers t (or 0 if not).
// Log lines go to <log_file> (never to a pipe that could fill and stall the server).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "hmc/runtime/log.hpp"
#include "hmc/session.hpp"

namespace {

using namespace std::chrono_literals;

bool holds_pattern(hmc::Session& s, std::uint64_t t, std::size_t n) {
  std::vector<std::byte> got(n);
  s.buffer().read_to_cpu(got.data(), n, 0);
  for (std::size_t i = 0; i < n; ++i)
    if (got[i] != static_cast<std::byte>((t * 131 + i) & 0xff)) return false;
  return true;
}

std::mutex active_mutex;
std::set<std::uint32_t> active;  // ranks with a serving thread

void serve(hmc::Session& s, std::uint32_t rank) {
  try {
    for (;;) {
      const std::uint64_t t = s.ctrl_recv(rank, 3600s);
      s.ctrl_send(rank, holds_pattern(s, t, 4096) ? t : 0);
    }
  } catch (const std::exception&) {
    // The peer left or sent something that is not a tag: this peer's service ends.
  }
  std::lock_guard<std::mutex> lock(active_mutex);
  active.erase(rank);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s max_connections max_handshakes hello_timeout_ms log_file\n", argv[0]);
    return 2;
  }
  std::mutex log_mutex;
  std::ofstream log(argv[4], std::ios::app);
  hmc::runtime::set_log_hook([&](hmc::runtime::LogLevel level, std::string_view msg) {
    std::lock_guard<std::mutex> lock(log_mutex);
    log << static_cast<int>(level) << " " << msg << "\n" << std::flush;
  });
  try {
    hmc::SessionOptions o;
    o.buffer_size = 1u << 20;
    o.ucx_net_devices = "lo";
    o.timeout = 20s;
    o.ctrl.max_connections = std::strtoul(argv[1], nullptr, 10);
    o.ctrl.max_handshakes = std::strtoul(argv[2], nullptr, 10);
    o.ctrl.hello_timeout = std::chrono::milliseconds(std::strtol(argv[3], nullptr, 10));
    hmc::Session s(o);
    s.init_server("127.0.0.1", 0);
    std::printf("PORT %u\n", s.ctrl_port());
    std::fflush(stdout);
    for (;;) {  // runs until the test kills it
      for (std::uint32_t rank : s.peers()) {
        std::lock_guard<std::mutex> lock(active_mutex);
        if (active.insert(rank).second) std::thread(serve, std::ref(s), rank).detach();
      }
      std::this_thread::sleep_for(20ms);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hmc_hostile_server: %s\n", e.what());
    return 1;
  }
}
