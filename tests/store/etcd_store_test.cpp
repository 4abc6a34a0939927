// The etcd backend against a real etcd (Debian's etcd-server, started here on loopback): every
// operation, waits by watch, leases expiring a dead client's keys, endpoint failover, a world
// bootstrapped through it, and etcd killed during start-up. Skipped with the reason when etcd is
// not installed.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "../ctrl/child_process.hpp"
#include "../world/free_port.hpp"
#include "hmc/error.hpp"
#include "hmc/store/store.hpp"

namespace hmc {
namespace {

using namespace std::chrono_literals;
using test::ChildProcess;
using test::free_port;

constexpr const char* kEtcd = "/usr/bin/etcd";

// One etcd member on loopback with its data in a temporary directory.
class Etcd {
 public:
  Etcd() {
    char tmpl[] = "/tmp/hmc-etcd-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    client_ = free_port();
    const auto peer = free_port();
    const std::string c = "http://127.0.0.1:" + std::to_string(client_);
    const std::string p = "http://127.0.0.1:" + std::to_string(peer);
    proc_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{kEtcd, "--data-dir", dir_ + "/data", "--listen-client-urls", c,
                                 "--advertise-client-urls", c, "--listen-peer-urls", p, "--initial-advertise-peer-urls",
                                 p, "--initial-cluster", "default=" + p, "--logger", "zap", "--log-level", "error"});
  }
  ~Etcd() {
    stop();
    std::filesystem::remove_all(dir_);
  }
  void stop() {
    if (proc_) {
      proc_->kill(SIGKILL);
      proc_->wait(10s);
      proc_.reset();
    }
  }
  std::string url() const { return "etcd://127.0.0.1:" + std::to_string(client_); }
  std::uint16_t port() const { return client_; }

 private:
  std::string dir_;
  std::uint16_t client_ = 0;
  std::unique_ptr<ChildProcess> proc_;
};

StoreOptions options(const std::string& job = "etcd-test") {
  StoreOptions o;
  o.job_id = job;
  o.timeout = 10s;  // etcd's first start on a loaded machine takes a few seconds
  o.lease_ttl = 2s;
  return o;
}

class EtcdStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::filesystem::exists(kEtcd)) etcd = new Etcd();
  }
  static void TearDownTestSuite() {
    delete etcd;
    etcd = nullptr;
  }
  void SetUp() override {
    if (etcd == nullptr)
      GTEST_SKIP() << kEtcd << " is missing (Debian package etcd-server; scripts/deps.sh installs it)";
  }
  static Etcd* etcd;
};

Etcd* EtcdStoreTest::etcd = nullptr;

TEST_F(EtcdStoreTest, OperationsDoWhatTheySay) {
  Store s(etcd->url(), options("ops"));
  s.set("a", std::string("one\0two", 7));
  EXPECT_EQ(s.get("a"), std::string("one\0two", 7));
  EXPECT_EQ(s.add("n", 5), 5);
  EXPECT_EQ(s.add("n", -2), 3);
  EXPECT_EQ(s.compare_set("c", "", "first"), "first");
  EXPECT_EQ(s.compare_set("c", "nope", "second"), "first");
  EXPECT_EQ(s.compare_set("c", "first", "second"), "second");
  EXPECT_TRUE(s.check({"a", "n", "c"}));
  EXPECT_FALSE(s.check({"a", "missing"}));
  EXPECT_TRUE(s.erase("a"));
  EXPECT_FALSE(s.erase("a"));
  EXPECT_THROW(s.add("c", 1), InvalidArgumentError);
}

TEST_F(EtcdStoreTest, ConcurrentAddsNeverLoseAnIncrement) {
  Store a(etcd->url(), options("adds")), b(etcd->url(), options("adds"));
  std::thread t([&] {
    for (int i = 0; i < 20; ++i) a.add("n", 1);
  });
  for (int i = 0; i < 20; ++i) b.add("n", 1);
  t.join();
  EXPECT_EQ(a.add("n", 0), 40);
}

TEST_F(EtcdStoreTest, GetAndWaitWatchForTheKeyAndTimeOutNamingIt) {
  Store a(etcd->url(), options("watch")), b(etcd->url(), options("watch"));
  std::thread later([&] {
    std::this_thread::sleep_for(200ms);
    b.set("x", "late");
    b.set("y", "later");
  });
  EXPECT_EQ(a.get("x", 5s), "late");
  a.wait({"x", "y"}, 5s);
  later.join();
  try {
    a.get("never", 300ms);
    FAIL() << "no timeout";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("never"), std::string::npos) << e.what();
  }
}

TEST_F(EtcdStoreTest, ADeadClientsKeysExpireWithItsLease) {
  Store watcher(etcd->url(), options("lease"));
  {
    Store mortal(etcd->url(), options("lease"));
    mortal.set("alive", "1");
    EXPECT_TRUE(watcher.check({"alive"}));
  }  // its keep-alive stops: the lease (2 s) runs out
  const auto end = std::chrono::steady_clock::now() + 15s;
  while (watcher.check({"alive"}) && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(watcher.check({"alive"}));
}

TEST_F(EtcdStoreTest, JobsNeverCollideAndEndpointsFailOver) {
  // The first endpoint refuses connections; the second is the member.
  const std::string url =
      "etcd://127.0.0.1:" + std::to_string(free_port()) + ",127.0.0.1:" + std::to_string(etcd->port());
  Store one(url, options("j1")), two(etcd->url(), options("j2"));
  one.set("k", "1");
  two.set("k", "2");
  EXPECT_EQ(one.get("k"), "1");
  EXPECT_EQ(two.get("k"), "2");
}

TEST_F(EtcdStoreTest, AnUnreachableEtcdIsATypedErrorNamingTheUrl) {
  auto o = options();
  o.timeout = 300ms;
  const std::string url = "etcd://127.0.0.1:" + std::to_string(free_port());
  try {
    Store s(url, o);
    FAIL() << "connected to nothing";
  } catch (const NotConnectedError& e) {
    EXPECT_NE(std::string(e.what()).find(url), std::string::npos) << e.what();
  }
}

// A world of processes through etcd, and etcd killed while ranks wait for the others to join.
TEST_F(EtcdStoreTest, AWorldBootstrapsThroughEtcdAndFailsCleanlyWhenEtcdDies) {
  const std::string dir = "/tmp/hmc-etcd-world-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.push_back(std::make_unique<ChildProcess>(std::vector<std::string>{
        HMC_WORLD_PEER_PATH, "url=" + etcd->url(), "size=3", "job=etcd-world", "uds=" + dir, "scenario=collectives"}));
  for (auto& p : ranks) {
    std::string line;
    while (!(line = p->read_line(60s)).empty() && line != "DONE" && line.rfind("ERROR", 0) != 0 &&
           line.rfind("FAIL", 0) != 0) {
    }
    EXPECT_EQ(line, "DONE");
    EXPECT_EQ(p->wait(30s), 0);
  }
  ranks.clear();

  // Two of three ranks join, then etcd (one of their own) dies: a typed error, no hang.
  Etcd doomed;
  for (int r = 0; r < 2; ++r)
    ranks.push_back(std::make_unique<ChildProcess>(std::vector<std::string>{HMC_WORLD_PEER_PATH, "url=" + doomed.url(),
                                                                            "size=3", "job=etcd-dies", "uds=" + dir,
                                                                            "scenario=join", "timeout_ms=8000"}));
  std::this_thread::sleep_for(2500ms);
  doomed.stop();
  for (auto& p : ranks) {
    const std::string line = p->read_line(30s);
    EXPECT_EQ(line.rfind("ERROR", 0), 0u) << line;
    EXPECT_TRUE(line.find("not connected") != std::string::npos || line.find("timed out") != std::string::npos) << line;
    EXPECT_EQ(p->wait(10s), 3);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hmc
