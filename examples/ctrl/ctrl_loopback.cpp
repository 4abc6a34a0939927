// Two control-channel endpoints on loopback, each on its own event loop as if on two hosts:
// HELLO, a "data ready" struct, a tag ping-pong with latency percentiles, and a one-way tag stream.
//   hmc_ctrl_loopback [round_trips=20000] [stream_tags=200000]     (CTRL_TRANSPORT=tcp|uds to force)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "hmc/ctrl_channel.hpp"
#include "hmc/runtime/log.hpp"

namespace asio = hmc::runtime::asio;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

struct DataReady {  // what a real sender puts in the control message after a put
  std::uint64_t offset;
  std::uint64_t size;
};

int main(int argc, char** argv) {
  const long round_trips = argc > 1 ? std::atol(argv[1]) : 20'000;
  const long stream_tags = argc > 2 ? std::atol(argv[2]) : 200'000;
  try {
    hmc::runtime::EventLoop server_loop, client_loop;
    server_loop.start();
    client_loop.start();
    std::printf("reactor: %s (Asio io_uring cancel fix: %s)\n", hmc::runtime::EventLoop::backend().data(),
                hmc::runtime::EventLoop::uring_cancel_fix() ? "applied" : "not needed/off");

    hmc::CtrlChannel server(server_loop, 0);
    const auto port = server.listen("127.0.0.1", 0);
    const std::string uds = server.uds_path();  // empty under CTRL_TRANSPORT=tcp
    std::printf("server rank 0 listening on 127.0.0.1:%u and %s\n", port,
                uds.empty() ? "no Unix socket (TCP only)" : uds.c_str());

    hmc::CtrlChannel client(client_loop, 1);
    const auto peer = client.async_connect("127.0.0.1", port, 5s, asio::use_future).get();
    std::printf("client rank 1 connected to rank %u over %s\n", peer, client.transport_of(peer).c_str());

    client.async_send(0, hmc::CtrlMessage::from_struct(DataReady{4096, 1 << 20}), asio::use_future).get();
    const auto ready = server.async_recv(1, 5s, asio::use_future).get().as<DataReady>();
    std::printf("server got DataReady{offset=%llu, size=%llu}\n", static_cast<unsigned long long>(ready.offset),
                static_cast<unsigned long long>(ready.size));

    // The server echoes every tag it receives, as a coroutine on its own loop.
    auto echo = asio::co_spawn(
        server_loop.executor(),
        [&]() -> asio::awaitable<void> {
          for (long i = 0; i < round_trips; ++i) {
            auto m = co_await server.async_recv(1, 10s, asio::use_awaitable);
            co_await server.async_send(1, std::move(m), asio::use_awaitable);
          }
        },
        asio::use_future);
    std::vector<double> rtt_us;
    rtt_us.reserve(static_cast<std::size_t>(round_trips));
    auto pingpong = asio::co_spawn(
        client_loop.executor(),
        [&]() -> asio::awaitable<void> {
          for (long i = 0; i < round_trips; ++i) {
            const auto t0 = clock_type::now();
            co_await client.async_send(0, hmc::CtrlMessage::from_tag(static_cast<std::uint64_t>(i)),
                                       asio::use_awaitable);
            auto m = co_await client.async_recv(0, 10s, asio::use_awaitable);
            if (m.tag() != static_cast<std::uint64_t>(i)) throw std::runtime_error("echo out of order");
            rtt_us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
            if ((i + 1) % (round_trips / 4 > 0 ? round_trips / 4 : 1) == 0)
              std::printf("  ping-pong %ld/%ld\n", i + 1, round_trips), std::fflush(stdout);
          }
        },
        asio::use_future);
    pingpong.get();
    echo.get();
    std::sort(rtt_us.begin(), rtt_us.end());
    auto pct = [&](double p) { return rtt_us[static_cast<std::size_t>(p * static_cast<double>(rtt_us.size() - 1))]; };
    std::printf("tag round trip over %s: p50 %.1f us, p99 %.1f us, max %.1f us (%ld round trips)\n",
                client.transport_of(0).c_str(), pct(0.50), pct(0.99), rtt_us.back(), round_trips);

    const auto t0 = clock_type::now();
    auto sink = asio::co_spawn(
        server_loop.executor(),
        [&]() -> asio::awaitable<long> {
          for (long i = 0; i < stream_tags; ++i)
            if ((co_await server.async_recv(1, 10s, asio::use_awaitable)).tag() != static_cast<std::uint64_t>(i))
              co_return i;
          co_return stream_tags;
        },
        asio::use_future);
    std::future<void> last;
    for (long i = 0; i < stream_tags; ++i)
      last = client.async_send(0, hmc::CtrlMessage::from_tag(static_cast<std::uint64_t>(i)), asio::use_future);
    last.get();
    const long in_order = sink.get();
    const double secs = std::chrono::duration<double>(clock_type::now() - t0).count();
    std::printf("one-way stream: %ld tags in order, %.0f tags/s\n", in_order, static_cast<double>(in_order) / secs);
    return in_order == stream_tags ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hmc_ctrl_loopback: %s\n", e.what());
    return 1;
  }
}
