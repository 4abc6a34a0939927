// A control-channel peer in its own process, for the two-process tests.
//   hmc_ctrl_peer <host> <port> <rank|any> <tags> [tcp|uds|auto] [spawn]
// Connects, prints "CONNECTED <transport>", sends tags 0..tags-1 (tags < 0: forever), then waits
// for one tag back from the server and prints "DONE". With "spawn" it first starts /bin/sleep as a
// child (printing "CHILD <pid>"), which must not inherit the control socket.
//   hmc_ctrl_peer session <host> <port>
// A Session connecting in the SDK form: prints "CONNECTED <rank>", then for each tag t != 0 from
// the server puts pattern(t) into the server's buffer at 0 and sends t back; tag 0 ends it.
#include <spawn.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "hmc/ctrl_channel.hpp"
#include "hmc/session.hpp"

extern char** environ;

namespace {

using namespace std::chrono_literals;

// The same byte pattern the tests check: byte i of pattern(t) is (t * 131 + i) & 0xff.
std::vector<std::byte> pattern(std::uint64_t t, std::size_t n) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((t * 131 + i) & 0xff);
  return v;
}

int session_peer(const char* host, std::uint16_t port) {
  hmc::SessionOptions o;
  o.buffer_size = 1u << 20;
  o.ucx_net_devices = "lo";
  o.timeout = 20s;
  hmc::Session s(o);
  const std::uint32_t server = s.connect(host, port);
  std::printf("CONNECTED %u\n", s.rank());
  std::fflush(stdout);
  for (;;) {
    const std::uint64_t t = s.ctrl_recv(server, 60s);
    if (t == 0) break;
    const auto p = pattern(t, 4096);
    s.buffer().write_from_cpu(p.data(), p.size(), 0);
    s.put(server, 0, 0, p.size());
    s.ctrl_send(server, t);
  }
  std::printf("DONE\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 4 && std::string(argv[1]) == "session") {
    try {
      return session_peer(argv[2], static_cast<std::uint16_t>(std::atoi(argv[3])));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "hmc_ctrl_peer session: %s\n", e.what());
      return 1;
    }
  }
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s host port rank|any tags [tcp|uds|auto] [spawn]\n", argv[0]);
    return 2;
  }
  try {
    hmc::CtrlOptions opts = hmc::CtrlOptions::from_env();
    if (argc > 5) {
      const std::string t = argv[5];
      opts.transport = t == "tcp"   ? hmc::CtrlTransport::tcp
                       : t == "uds" ? hmc::CtrlTransport::uds
                                    : hmc::CtrlTransport::automatic;
    }
    const std::string rank = argv[3];
    hmc::runtime::EventLoop loop;
    loop.start();
    hmc::CtrlChannel ch(
        loop, rank == "any" ? hmc::CtrlChannel::any_rank : static_cast<std::uint32_t>(std::atoi(argv[3])), opts);
    const auto server =
        ch.async_connect(argv[1], static_cast<std::uint16_t>(std::atoi(argv[2])), 10s, hmc::runtime::asio::use_future)
            .get();
    if (argc > 6 && std::string(argv[6]) == "spawn") {
      pid_t child = -1;
      char sleep_path[] = "/bin/sleep";
      char seconds[] = "30";
      char* child_argv[] = {sleep_path, seconds, nullptr};
      if (::posix_spawn(&child, sleep_path, nullptr, nullptr, child_argv, environ) != 0) return 3;
      std::printf("CHILD %d\n", static_cast<int>(child));
    }
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
