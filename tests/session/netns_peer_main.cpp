// One side of the two-namespace test (run under `ip netns exec`): verified puts and tags both ways
// with default UCX transports in event mode, then the process's CPU time.
//   hmc_netns_peer server <bind_ip> <ctrl_port> <data_port> <rounds> <uds_dir> [linger_s]
//   hmc_netns_peer client <server_ip> <ctrl_port> <data_port> <rounds> <uds_dir> <local_ip> [linger_s]
// Prints "READY <transports or listening>" once connected/listening, then "OK cpu_ms=<n> wall_ms=<n>".
// With linger_s, it then waits that long for the peer and prints "LOST" when it is declared lost
// (or "QUIET" when not).
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "session_test_util.hpp"

namespace {

double cpu_ms() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return (static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 +
          static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  using hmc::test::fill;
  using hmc::test::holds;
  const std::string role = argc > 1 ? argv[1] : "";
  if ((role != "server" || argc < 7) && (role != "client" || argc < 8)) {
    std::fprintf(stderr, "usage: %s server|client ip ctrl_port data_port rounds uds_dir [local_ip]\n", argv[0]);
    return 2;
  }
  try {
    const std::string ip = argv[2];
    const auto ctrl_port = static_cast<std::uint16_t>(std::atoi(argv[3]));
    const auto data_port = static_cast<std::uint16_t>(std::atoi(argv[4]));
    const int rounds = std::atoi(argv[5]);
    auto o = hmc::test::session_options("", hmc::runtime::ProgressMode::event, 1u << 20, argv[6]);
    o.ucx_net_devices.clear();  // the namespace's own veth (and lo)
    o.timeout = 10s;
    if (const char* ka = std::getenv("HMC_TEST_UCX_KEEPALIVE_MS"))
      o.ucx_keepalive = std::chrono::milliseconds(std::atoll(ka));
    if (role == "client") o.local_ip = argv[7];
    const auto start = std::chrono::steady_clock::now();
    const double cpu0 = cpu_ms();
    hmc::Session s(o);
    constexpr std::size_t kSize = 64u << 10;
    if (role == "server") {
      s.init_server(ip, data_port, 0, ctrl_port, 0, argv[6]);
      std::printf("READY listening\n");
      std::fflush(stdout);
      s.wait_peer(1, 30s);
      for (int i = 0; i < rounds; ++i) {
        const std::uint64_t tag = s.ctrl_recv(1, 10s);
        if (tag != static_cast<std::uint64_t>(i) || !holds(s.buffer(), 0, kSize, tag)) {
          std::printf("FAIL round %d: tag %llu\n", i, static_cast<unsigned long long>(tag));
          return 1;
        }
        fill(s.buffer(), kSize, kSize, tag + 1000);
        s.put(1, kSize, 0, kSize);
        s.ctrl_send(1, tag + 1000);
      }
    } else {
      s.connect(0, 1, ip, data_port, ctrl_port);
      std::printf("READY %s\n", s.transports(0).c_str());
      std::fflush(stdout);
      for (int i = 0; i < rounds; ++i) {
        fill(s.buffer(), 0, kSize, static_cast<std::uint64_t>(i));
        s.put(0, 0, 0, kSize);
        s.ctrl_send(0, static_cast<std::uint64_t>(i));
        const std::uint64_t back = s.ctrl_recv(0, 10s);
        if (back != static_cast<std::uint64_t>(i) + 1000 || !holds(s.buffer(), 0, kSize, back)) {
          std::printf("FAIL round %d: tag %llu\n", i, static_cast<unsigned long long>(back));
          return 1;
        }
      }
    }
    const auto wall = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    std::printf("OK cpu_ms=%.0f wall_ms=%lld\n", cpu_ms() - cpu0, static_cast<long long>(wall.count()));
    std::fflush(stdout);
    const int linger_arg = role == "server" ? 7 : 8;
    if (argc > linger_arg) {
      try {
        s.ctrl_recv(role == "server" ? 1 : 0, std::chrono::seconds(std::atoi(argv[linger_arg])));
        std::printf("MESSAGE\n");
      } catch (const hmc::PeerLostError&) {
        std::printf("LOST\n");
      } catch (const hmc::TimeoutError&) {
        std::printf("QUIET\n");
      }
      std::fflush(stdout);
    }
    return 0;
  } catch (const std::exception& e) {
    std::printf("FAIL %s\n", e.what());
    std::fflush(stdout);
    return 1;
  }
}
