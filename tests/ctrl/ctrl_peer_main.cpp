// A control-channel peer in its own process, for the two-process tests.
//   hmc_ctrl_peer <host> <port> <rank> <tags> [tcp|uds|auto]
// Connects, prints "CONNECTED <transport>", sends tags 0..tags-1 (tags < 0: forever), then waits
// for one tag back from rank 0 and prints "DONE".
#include <cstdio>
#include <cstdlib>
#include <string>

#include "hmc/ctrl_channel.hpp"

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s host port rank tags [tcp|uds|auto]\n", argv[0]);
    return 2;
  }
  try {
    hmc::CtrlOptions opts = hmc::CtrlOptions::from_env();
    if (argc > 5) {
      const std::string t = argv[5];
      opts.transport = t == "tcp" ? hmc::CtrlTransport::tcp
                       : t == "uds" ? hmc::CtrlTransport::uds
                                    : hmc::CtrlTransport::automatic;
    }
    hmc::runtime::EventLoop loop;
    loop.start();
    hmc::CtrlChannel ch(loop, static_cast<std::uint32_t>(std::atoi(argv[3])), opts);
    const auto server = ch.async_connect(argv[1], static_cast<std::uint16_t>(std::atoi(argv[2])), 10s,
                                         hmc::runtime::asio::use_future).get();
    std::printf("CONNECTED %s\n", ch.transport_of(server).c_str());
    std::fflush(stdout);
    const long long tags = std::atoll(argv[4]);
    for (long long i = 0; tags < 0 || i < tags; ++i) {
      // Futures of the last send only: order is guaranteed by the channel, not by waiting.
      auto f = ch.async_send(server, hmc::CtrlMessage::from_tag(static_cast<std::uint64_t>(i)),
                             hmc::runtime::asio::use_future);
      if (i % 1024 == 1023 || i + 1 == tags) f.get();
    }
    ch.async_recv(server, 30s, hmc::runtime::asio::use_future).get();
    std::printf("DONE\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hmc_ctrl_peer: %s\n", e.what());
    return 1;
  }
}
