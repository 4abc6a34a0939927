// The client half: put a buffer into the server, signal it, check its checksum, get its reply.
//   hmc_put_get_client [server_ip=127.0.0.1] [ctrl_port=18600] [bytes=8388608]
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "hmc/error.hpp"
#include "hmc/session.hpp"

namespace asio = hmc::runtime::asio;
using namespace std::chrono_literals;

asio::awaitable<bool> run(hmc::Session& s, std::uint64_t size) {
  std::vector<unsigned char> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<unsigned char>(i * 31 + 7);
  s.buffer().write_from_cpu(bytes.data(), size, 0);
  const std::uint64_t sum = std::accumulate(bytes.begin(), bytes.end(), std::uint64_t{0});

  // Without a completion token async_* return awaitables (Session::default_token).
  co_await s.async_put(0, 0, 0, size);                              // done = visible in the server's buffer
  co_await s.async_ctrl_send(0, hmc::CtrlMessage::from_tag(size));  // "data ready"
  const std::uint64_t server_sum = (co_await s.async_ctrl_recv(0, 60s)).tag();
  std::printf("client: put %llu bytes, checksum %llu, server computed %llu: %s\n",
              static_cast<unsigned long long>(size), static_cast<unsigned long long>(sum),
              static_cast<unsigned long long>(server_sum), sum == server_sum ? "match" : "MISMATCH");

  const std::string expected = "hello from the server";
  co_await s.async_get(0, 0, size, expected.size());
  std::string reply(expected.size(), '\0');
  s.buffer().read_to_cpu(reply.data(), reply.size(), 0);
  std::printf("client: got \"%s\" from the server's buffer\n", reply.c_str());
  co_return sum == server_sum&& reply == expected;
}

int main(int argc, char** argv) {
  const std::string ip = argc > 1 ? argv[1] : "127.0.0.1";
  const auto port = static_cast<std::uint16_t>(argc > 2 ? std::atoi(argv[2]) : 18600);
  const std::uint64_t size = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : (8u << 20);
  try {
    hmc::SessionOptions o;
    o.buffer_size = 64u << 20;
    hmc::Session s(o);
    s.connect(/*peer_id=*/0, /*self_id=*/1, ip, /*data_port=*/port + 1, port);
    std::printf("client: connected to rank 0 over UCX %s\n", s.transports(0).c_str());
    asio::io_context io;
    auto ok = asio::co_spawn(io, run(s, size), asio::use_future);
    io.run();
    const bool good = ok.get();
    s.ctrl_send(0, 0);  // goodbye
    return good ? 0 : 1;
  } catch (const hmc::Error& e) {
    std::fprintf(stderr, "client: %s\n", e.what());
    return 1;
  }
}
