// The server half of the first thing to copy: wait for a client, check the bytes it put, answer.
//   hmc_put_get_server [bind_ip=127.0.0.1] [ctrl_port=18600]
// Run hmc_put_get_client against it from another terminal (or another host).
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "hmc/error.hpp"
#include "hmc/session.hpp"

namespace asio = hmc::runtime::asio;
using namespace std::chrono_literals;

// The client sends the size of what it put as the tag; the answer is a checksum of those bytes.
asio::awaitable<void> serve(hmc::Session& s, std::uint32_t client) {
  const std::uint64_t size = (co_await s.async_ctrl_recv(client, 60s, asio::use_awaitable)).tag();
  std::vector<unsigned char> bytes(size);
  s.buffer().read_to_cpu(bytes.data(), size, 0);  // the put completed before the tag was sent
  const std::uint64_t sum = std::accumulate(bytes.begin(), bytes.end(), std::uint64_t{0});
  std::printf("server: client %u put %llu bytes, checksum %llu\n", client, static_cast<unsigned long long>(size),
              static_cast<unsigned long long>(sum));
  // Leave a reply in our own buffer for the client to get, then tell it the checksum.
  const std::string reply = "hello from the server";
  s.buffer().write_from_cpu(reply.data(), reply.size(), size);
  co_await s.async_ctrl_send(client, hmc::CtrlMessage::from_tag(sum), asio::use_awaitable);
}

int main(int argc, char** argv) {
  const std::string ip = argc > 1 ? argv[1] : "127.0.0.1";
  const auto port = static_cast<std::uint16_t>(argc > 2 ? std::atoi(argv[2]) : 18600);
  try {
    hmc::SessionOptions o;
    o.buffer_size = 64u << 20;
    hmc::Session s(o);
    s.init_server(ip, /*ucx_port=*/port + 1, /*rdma_port=*/0, port, /*self_id=*/0);
    std::printf("server: rank 0 listening on %s:%u, waiting 60 s for client rank 1\n", ip.c_str(), port);
    std::fflush(stdout);
    s.wait_peer(1, 60s);
    std::printf("server: client rank 1 connected over UCX %s\n", s.transports(1).c_str());
    asio::io_context io;  // the application's own executor: HMC completes onto it
    auto done = asio::co_spawn(io, serve(s, 1), asio::use_future);
    io.run();
    done.get();
    s.ctrl_recv(1, 60s);  // the client says goodbye after its get
    return 0;
  } catch (const hmc::Error& e) {
    std::fprintf(stderr, "server: %s\n", e.what());
    return 1;
  }
}
