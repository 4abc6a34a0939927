// Two sessions in two network namespaces of one kernel share a boot id but not the
// abstract Unix sockets UCX's shared-memory transports signal through. They must talk over the
// network (default UCX_TLS: HMC's checked TCP path; event mode), with verified puts and tags both ways, and never spin.
// Needs root and `ip netns`; skips with the reason otherwise. The silent-link case takes ~15 s and
// runs only with HMC_LONG_TESTS=1.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "../ctrl/child_process.hpp"
#include "session_test_util.hpp"

namespace hmc {
namespace {

using namespace std::chrono_literals;

bool sh(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()) == 0; }

// Two namespaces joined by a veth pair: a = 10.77.<n>.1, b = 10.77.<n>.2.
class NetnsPair {
 public:
  NetnsPair() {
    const std::string id = std::to_string(::getpid());
    a = "hmc-eng-" + id + "-a";
    b = "hmc-eng-" + id + "-b";
    const std::string va = "he" + id + "a", vb = "he" + id + "b";
    ok = sh("ip netns add " + a) && sh("ip netns add " + b) && sh("ip link add " + va + " type veth peer name " + vb) &&
         sh("ip link set " + va + " netns " + a) && sh("ip link set " + vb + " netns " + b) &&
         sh("ip -n " + a + " addr add " + ip_a + "/24 dev " + va) &&
         sh("ip -n " + b + " addr add " + ip_b + "/24 dev " + vb) && sh("ip -n " + a + " link set " + va + " up") &&
         sh("ip -n " + b + " link set " + vb + " up") && sh("ip -n " + a + " link set lo up") &&
         sh("ip -n " + b + " link set lo up");
  }
  ~NetnsPair() {
    sh("ip netns del " + a);  // takes its end of the veth pair with it
    sh("ip netns del " + b);
  }
  std::vector<std::string> exec_in(const std::string& ns) const { return {"/usr/bin/env", "ip", "netns", "exec", ns}; }

  std::string a, b;
  const std::string ip_a = "10.77.41.1", ip_b = "10.77.41.2";
  bool ok = false;
};

long field(const std::string& line, const std::string& key) {
  const auto at = line.find(key + "=");
  return at == std::string::npos ? -1 : std::stol(line.substr(at + key.size() + 1));
}

TEST(SessionNetns, PeersInTwoNetworkNamespacesUseTheNetworkAndNeverSpin) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for ip netns";
  if (!sh("ip netns list")) GTEST_SKIP() << "ip netns is unavailable";
  NetnsPair net;
  if (!net.ok) GTEST_SKIP() << "could not create two network namespaces joined by a veth pair";
  const std::string dir_a = test::temp_dir(), dir_b = test::temp_dir();
  constexpr int kRounds = 50;
  auto server_argv = net.exec_in(net.a);
  for (const std::string& arg : {std::string(HMC_NETNS_PEER_PATH), std::string("server"), net.ip_a,
                                 std::string("18710"), std::string("18711"), std::to_string(kRounds), dir_a})
    server_argv.push_back(arg);
  test::ChildProcess server(server_argv);
  ASSERT_TRUE(server.started());
  ASSERT_EQ(server.read_line(20s), "READY listening");
  auto client_argv = net.exec_in(net.b);
  for (const std::string& arg : {std::string(HMC_NETNS_PEER_PATH), std::string("client"), net.ip_a,
                                 std::string("18710"), std::string("18711"), std::to_string(kRounds), dir_b, net.ip_b})
    client_argv.push_back(arg);
  test::ChildProcess client(client_argv);
  ASSERT_TRUE(client.started());
  const std::string ready = client.read_line(30s);
  EXPECT_EQ(ready.rfind("READY ", 0), 0u) << ready;
  // HMC's checked TCP path: UCX's own tcp is not used unless named.
  EXPECT_EQ(ready, "READY hmc-tcp") << "not the checked TCP path between namespaces";
  for (const char* shm : {"posix", "sysv", "cma"})
    EXPECT_EQ(ready.find(shm), std::string::npos) << "shared memory across network namespaces: " << ready;
  const std::string client_done = client.read_line(60s);
  const std::string server_done = server.read_line(30s);
  std::printf("client: %s\nserver: %s\n", client_done.c_str(), server_done.c_str());
  EXPECT_EQ(client_done.rfind("OK ", 0), 0u) << client_done;
  EXPECT_EQ(server_done.rfind("OK ", 0), 0u) << server_done;
  EXPECT_EQ(client.wait(), 0);
  EXPECT_EQ(server.wait(), 0);
  // A spinning wait burns a core for the whole run; real work here is a few hundred ms at most.
  const long cpu = field(client_done, "cpu_ms"), wall = field(client_done, "wall_ms");
  EXPECT_LT(cpu, wall / 2 + 1000) << "the client spent its time spinning";
  std::filesystem::remove_all(dir_a);
  std::filesystem::remove_all(dir_b);
}

// A silent link (every frame between the two dropped): the control channel's heartbeats (5 s) or
// the data connections' keepalive (SessionOptions::ucx_keepalive, 5 s here, + 3 x 1 s) declare the
// peer lost, whichever comes first.
TEST(SessionNetns, SilentPeerIsDeclaredLostWithinTheLivenessLimits) {
  if (std::getenv("HMC_LONG_TESTS") == nullptr) GTEST_SKIP() << "long test: set HMC_LONG_TESTS=1";
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for ip netns";
  if (!sh("nft --version")) GTEST_SKIP() << "needs nftables to silence the link";
  NetnsPair net;
  if (!net.ok) GTEST_SKIP() << "could not create two network namespaces joined by a veth pair";
  ::setenv("HMC_TEST_UCX_KEEPALIVE_MS", "5000", 1);  // read by hmc_netns_peer
  const std::string dir_a = test::temp_dir(), dir_b = test::temp_dir();
  auto server_argv = net.exec_in(net.a);
  for (const std::string& arg :
       {std::string(HMC_NETNS_PEER_PATH), std::string("server"), net.ip_a, std::string("18710"), std::string("18711"),
        std::string("3"), dir_a, std::string("40")})
    server_argv.push_back(arg);
  test::ChildProcess server(server_argv);
  ASSERT_EQ(server.read_line(20s), "READY listening");
  auto client_argv = net.exec_in(net.b);
  for (const std::string& arg :
       {std::string(HMC_NETNS_PEER_PATH), std::string("client"), net.ip_a, std::string("18710"), std::string("18711"),
        std::string("3"), dir_b, net.ip_b, std::string("40")})
    client_argv.push_back(arg);
  test::ChildProcess client(client_argv);
  EXPECT_EQ(client.read_line(30s), "READY hmc-tcp");
  EXPECT_EQ(client.read_line(30s).rfind("OK ", 0), 0u);
  EXPECT_EQ(server.read_line(30s).rfind("OK ", 0), 0u);
  ::unsetenv("HMC_TEST_UCX_KEEPALIVE_MS");
  // An idle link: with data unacknowledged when it goes silent, the kernel retransmits for minutes
  // instead of probing (the limit docs/failure-model.md states).
  std::this_thread::sleep_for(1s);
  for (const std::string& ns : {net.a, net.b})
    ASSERT_TRUE(sh("ip netns exec " + ns +
                   " nft 'add table inet hmc; add chain inet hmc in { type filter hook input "
                   "priority 0; iifname != lo drop; }; add chain inet hmc out { type filter hook output priority 0; "
                   "oifname != lo drop; }'"));
  const auto cut = std::chrono::steady_clock::now();
  std::string lost;
  while (lost.empty() && std::chrono::steady_clock::now() - cut < 30s) {
    if (server.read_line(200ms) == "LOST") lost = "server";
    if (client.read_line(200ms) == "LOST") lost = "client";
  }
  const auto after = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - cut);
  std::printf("%s declared its peer lost %lld ms after the link went silent\n", lost.c_str(),
              static_cast<long long>(after.count()));
  EXPECT_FALSE(lost.empty()) << "neither side noticed a silent peer within 30 s";
  EXPECT_LT(after, 20s);
  std::filesystem::remove_all(dir_a);
  std::filesystem::remove_all(dir_b);
}

}  // namespace
}  // namespace hmc
