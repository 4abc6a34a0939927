// Two processes put and get between session buffers of one memory type, every byte checked.
//   hmc_gpu_peer <cpu|nvidia_gpu|amd_gpu> <tls>
// The process started serves as rank 0 and starts itself again as rank 1, which puts a pattern into
// rank 0's buffer and gets rank 0's pattern back, for 1 B, 256 KiB + 1 and 8 MiB + 3 at odd offsets.
// Exit status: 0 every byte arrived, 1 a failure (printed), 77 no device of that type here (the
// reason printed). scripts/device-check runs it on a GPU machine.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "../ctrl/child_process.hpp"
#include "../session/session_test_util.hpp"
#include "hmc/memory.hpp"

namespace {

using namespace std::chrono_literals;
using hmc::test::fill;
using hmc::test::holds;

constexpr std::size_t kSizes[] = {1, (256u << 10) + 1, (8u << 20) + 3};
constexpr std::size_t kPutAt = 1001, kGetFrom = 7, kLocal = 3;

hmc::SessionOptions options(hmc::MemoryType type, const std::string& tls) {
  hmc::SessionOptions o;
  o.buffer_size = 16u << 20;
  o.mem_type = type;
  o.ucx_tls = tls;
  o.ucx_net_devices = "lo";  // keep UCX's tcp traffic on loopback
  o.staging_chunk = 256u << 10;
  return o;
}

int serve(hmc::MemoryType type, const std::string& tls) {
  hmc::Session s(options(type, tls));
  s.init_server("127.0.0.1", 0);
  const std::string port = std::to_string(s.ctrl_port());
  hmc::test::ChildProcess client({"/proc/self/exe", "--client", port, std::string(to_string(type)), tls});
  if (!client.started()) {
    std::printf("server: cannot start the client process\n");
    return 1;
  }
  s.wait_peer(1, 30s);
  bool good = true;
  for (const std::size_t n : kSizes) {
    const auto seed = static_cast<std::uint64_t>(n) * 2;
    const bool arrived = s.ctrl_recv(1, 30s) == n && holds(s.buffer(), kPutAt, n, seed);
    std::printf("server: put of %zu bytes from rank 1: %s\n", n, arrived ? "every byte arrived" : "WRONG BYTES");
    good = good && arrived;
    fill(s.buffer(), kGetFrom, n, seed + 1);
    s.ctrl_send(1, arrived ? 1 : 0);
  }
  s.ctrl_recv(1, 30s);  // the client's goodbye: its last get is done
  const int status = client.wait(30s);
  for (std::string line = client.read_line(1s); !line.empty(); line = client.read_line(1s))
    std::printf("%s\n", line.c_str());
  if (status != 0) std::printf("server: the client process ended with status %d\n", status);
  return good && status == 0 ? 0 : 1;
}

int connect_and_check(hmc::MemoryType type, const std::string& tls, std::uint16_t port) {
  hmc::Session s(options(type, tls));
  s.connect("127.0.0.1", port);
  std::printf("client: connected over UCX %s\n", s.transports(0).c_str());
  bool good = true;
  for (const std::size_t n : kSizes) {
    const auto seed = static_cast<std::uint64_t>(n) * 2;
    fill(s.buffer(), kLocal, n, seed);
    s.put(0, kLocal, kPutAt, n);
    s.ctrl_send(0, n);
    const bool server_saw_it = s.ctrl_recv(0, 30s) == 1;  // also: rank 0 has written what we get next
    s.get(0, kLocal, kGetFrom, n);
    const bool arrived = holds(s.buffer(), kLocal, n, seed + 1);
    std::printf("client: get of %zu bytes from rank 0: %s\n", n, arrived ? "every byte arrived" : "WRONG BYTES");
    good = good && server_saw_it && arrived;
  }
  s.ctrl_send(0, 0);
  return good ? 0 : 1;
}

bool parse(const char* name, hmc::MemoryType& out) {
  for (auto t : {hmc::MemoryType::CPU, hmc::MemoryType::NVIDIA_GPU, hmc::MemoryType::AMD_GPU})
    if (to_string(t) == name) return out = t, true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const bool client = argc == 5 && std::string(argv[1]) == "--client";
  hmc::MemoryType type{};
  if ((argc != 3 && !client) || !parse(argv[client ? 3 : 1], type)) {
    std::fprintf(stderr, "usage: %s <cpu|nvidia_gpu|amd_gpu> <tls>\n", argv[0]);
    return 2;
  }
  try {
    if (client) return connect_and_check(type, argv[4], static_cast<std::uint16_t>(std::atoi(argv[2])));
    std::string why;
    if (!hmc::Memory::available(type, 0, &why)) {
      std::printf("SKIP: no %s device: %s\n", argv[1], why.c_str());
      return 77;
    }
    return serve(type, argv[2]);
  } catch (const std::exception& e) {
    std::printf("%s: %s\n", client ? "client" : "server", e.what());
    return 1;
  }
}
