// A Session client in its own process, for the two-process tests.
//   hmc_session_peer <ctrl_port> <rank> <rounds> <tls> <uds_dir>
// Connects to rank 0 on 127.0.0.1 (data port 1), prints "CONNECTED <transports>", then per round writes
// pattern(round) to its buffer, puts it to rank 0 at offset rank MiB and sends the round as a tag
// (rounds < 0: until killed). Finally waits for one tag from rank 0 and prints "DONE".
#include <cstdio>
#include <cstdlib>

#include "session_test_util.hpp"

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s ctrl_port rank rounds tls uds_dir\n", argv[0]);
    return 2;
  }
  try {
    const auto port = static_cast<std::uint16_t>(std::atoi(argv[1]));
    const auto rank = static_cast<std::uint32_t>(std::atoi(argv[2]));
    const long long rounds = std::atoll(argv[3]);
    hmc::Session s(hmc::test::session_options(argv[4], hmc::runtime::ProgressMode::event, 4u << 20, argv[5]));
    s.connect(0, rank, "127.0.0.1", 1, port);
    std::printf("CONNECTED %s\n", s.transports(0).c_str());
    std::fflush(stdout);
    constexpr std::size_t kSize = 256u << 10;
    for (long long i = 0; rounds < 0 || i < rounds; ++i) {
      hmc::test::fill(s.buffer(), 0, kSize, static_cast<std::uint64_t>(i));
      s.put(0, 0, rank * (1u << 20), kSize);
      s.ctrl_send(0, static_cast<std::uint64_t>(i));
      s.ctrl_recv(0, 30s);  // the server has read this round: the region may be rewritten
    }
    s.ctrl_recv(0, 30s);
    std::printf("DONE\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hmc_session_peer: %s\n", e.what());
    return 1;
  }
}
