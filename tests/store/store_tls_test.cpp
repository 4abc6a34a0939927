// The embedded store over TLS, with throw-away certificates: both sides verify, the key handshake
// still runs inside, strangers, revoked certificates and one-sided TLS are typed errors without a
// hang, and an encrypted key opens with its password only.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "../ctrl/ctrl_test_util.hpp"
#include "../hostile/flood.hpp"
#include "../security/test_certs.hpp"
#include "hmc/error.hpp"
#include "hmc/store/store.hpp"
#include "hmc/store/store_server.hpp"

namespace hmc {
namespace {

using namespace std::chrono_literals;

std::string certs;

std::string file(const std::string& name) { return certs + "/" + name; }

std::string contents(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// `node`'s certificate and key, trusting `ca`.
TlsOptions tls(const std::string& node, const std::string& ca) {
  TlsOptions t;
  t.cert = file(node + ".pem");
  t.key = file(node + ".key");
  t.ca = {file(ca + "-ca.pem")};
  return t;
}

class StoreTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    certs = test::make_temp_dir();
    // good: the store's CA; alice and mallory hold certificates it signed, mallory's is revoked;
    // evil: a CA nobody here trusts.
    ready = test::make_ca_and_node(certs, "good") && test::make_ca_and_node(certs, "evil") &&
            test::make_node(certs, "good", "alice") && test::make_node(certs, "good", "mallory") &&
            test::encrypt_key(certs, "alice", "alice-key-password") && test::revoke(certs, "good", "mallory");
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(certs); }
  void SetUp() override { ASSERT_TRUE(ready) << "openssl could not make the test certificates"; }

  std::string serve(TlsOptions t) {
    StoreServerOptions o;
    o.auth_key = "the store tls test key";
    o.tls = std::move(t);
    server = std::make_unique<StoreServer>(o);
    return "tcp://127.0.0.1:" + std::to_string(server->listen("127.0.0.1", 0));
  }
  static StoreOptions client(TlsOptions t, std::chrono::milliseconds timeout = 20s) {
    StoreOptions o;
    o.auth_key = "the store tls test key";
    o.job_id = "tls";
    o.timeout = timeout;
    o.tls = std::move(t);
    return o;
  }
  // The error a client with `o` gets from `url`, and how long it took.
  template <class E>
  static std::string refused(const std::string& url, const StoreOptions& o, std::chrono::milliseconds& took) {
    const auto start = std::chrono::steady_clock::now();
    try {
      Store s(url, o);
    } catch (const E& e) {
      took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
      return e.what();
    }
    ADD_FAILURE() << "the client connected";
    return "";
  }

  static inline bool ready = false;
  std::unique_ptr<StoreServer> server;
};

TEST_F(StoreTlsTest, BothSidesVerifyAndEveryOperationWorks) {
  const std::string url = serve(tls("good", "good"));
  Store a(url, client(tls("alice", "good")));
  Store b(url, client(tls("good", "good")));
  const std::string big(1 << 20, 'x');  // many TLS records
  a.set("big", big);
  EXPECT_EQ(b.get("big"), big);
  EXPECT_EQ(a.add("n", 2), 2);
  EXPECT_EQ(b.add("n", 3), 5);
  EXPECT_EQ(a.compare_set("k", "", "v"), "v");
  EXPECT_TRUE(b.check({"k", "n"}));
  EXPECT_TRUE(b.erase("k"));
  EXPECT_EQ(server->connections(), 2u);
}

TEST_F(StoreTlsTest, ACertificateNoTrustedCaSignedIsAnAuthenticationErrorWithoutAHang) {
  const std::string url = serve(tls("good", "good"));
  std::chrono::milliseconds took{};
  // The server does not trust the client's CA.
  refused<AuthenticationError>(url, client(tls("evil", "good")), took);
  EXPECT_LT(took, 10s) << "refused at once, not retried until the 20 s timeout";
  // The client does not trust the server's CA.
  const std::string why = refused<AuthenticationError>(url, client(tls("good", "evil")), took);
  EXPECT_LT(took, 10s);
  EXPECT_NE(why.find("TLS"), std::string::npos) << why;
  Store good(url, client(tls("alice", "good")));
  good.set("still", "served");
}

TEST_F(StoreTlsTest, TheKeyHandshakeStillRunsInsideTls) {
  const std::string url = serve(tls("good", "good"));
  auto o = client(tls("alice", "good"));
  o.auth_key = "another store tls test key";
  std::chrono::milliseconds took{};
  const std::string why = refused<AuthenticationError>(url, o, took);
  EXPECT_NE(why.find("authentication failed"), std::string::npos) << why;
}

TEST_F(StoreTlsTest, TlsOnOneSideOnlyFailsSayingWhy) {
  const std::string tls_url = serve(tls("good", "good"));
  std::chrono::milliseconds took{};
  const std::string plain_why = refused<AuthenticationError>(tls_url, client({}), took);
  EXPECT_NE(plain_why.find("this store requires TLS"), std::string::npos) << plain_why;
  EXPECT_LT(took, 10s);

  StoreServerOptions plain;
  plain.auth_key = "the store tls test key";
  StoreServer plain_server(plain);
  const std::string plain_url = "tcp://127.0.0.1:" + std::to_string(plain_server.listen("127.0.0.1", 0));
  const std::string tls_why = refused<NotConnectedError>(plain_url, client(tls("alice", "good"), 2s), took);
  EXPECT_NE(tls_why.find("does the store serve TLS?"), std::string::npos) << tls_why;
  EXPECT_LT(took, 10s);
}

TEST_F(StoreTlsTest, ARevokedCertificateIsRefusedAndOthersFromItsCaAreNot) {
  auto server_tls = tls("good", "good");
  server_tls.crl = {file("good-crl.pem")};
  const std::string url = serve(server_tls);
  std::chrono::milliseconds took{};
  refused<AuthenticationError>(url, client(tls("mallory", "good")), took);
  EXPECT_LT(took, 10s);
  Store alice(url, client(tls("alice", "good")));
  alice.set("a", "1");
}

TEST_F(StoreTlsTest, AnEncryptedKeyOpensWithItsPasswordOnly) {
  const std::string url = serve(tls("good", "good"));
  auto from_text = tls("alice", "good");
  from_text.key.clear();
  from_text.key_pem = contents(file("alice-enc.key"));
  from_text.key_password = "alice-key-password";
  Store a(url, client(from_text));
  a.set("k", "v");
  auto from_file = tls("alice", "good");
  from_file.key = file("alice-enc.key");
  from_file.key_password = "alice-key-password";
  Store b(url, client(from_file));
  EXPECT_EQ(b.get("k"), "v");

  from_text.key_password = "not the password";
  try {
    Store s(url, client(from_text));
    ADD_FAILURE() << "an encrypted key opened with a wrong password";
  } catch (const InvalidConfigError& e) {
    const std::string why = e.what();
    EXPECT_NE(why.find("wrong password?"), std::string::npos) << why;
    EXPECT_EQ(why.find("not the password"), std::string::npos) << "a password must never be in a message";
  }
  from_text.key_password.clear();
  EXPECT_THROW(Store(url, client(from_text)), InvalidConfigError);
}

// Garbage and one-byte connections never finish a TLS handshake: they take no more than a plaintext
// flood does, and a client with a trusted certificate gets in meanwhile.
TEST_F(StoreTlsTest, AClientWithATrustedCertificateGetsInWhileAFloodNeverFinishesTls) {
  const std::string url = serve(tls("good", "good"));
  const auto port = static_cast<std::uint16_t>(std::stoi(url.substr(url.rfind(':') + 1)));
  test::Flood flood(port, {"127.0.0.1"}, test::Flood::Mode::reopen);
  ASSERT_EQ(flood.setup_failures(), 0) << "the flood could not open all its connections";
  const auto t0 = std::chrono::steady_clock::now();
  Store honest(url, client(tls("alice", "good")));
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  honest.set("flood", "survived");
  EXPECT_EQ(honest.get("flood", 5s), "survived");
  std::printf("TLS store flood: %d connections; the client with a certificate connected in %lld ms\n", flood.stop(),
              static_cast<long long>(ms.count()));
}

TEST_F(StoreTlsTest, IncompleteOrUnreadableSettingsAreInvalidConfig) {
  TlsOptions no_key = tls("good", "good");
  no_key.key.clear();
  StoreServerOptions o;
  o.auth_key = "the store tls test key";
  o.tls = no_key;
  EXPECT_THROW(StoreServer{o}, InvalidConfigError);
  TlsOptions both = tls("good", "good");
  both.key_pem = contents(file("good.key"));
  o.tls = both;
  EXPECT_THROW(StoreServer{o}, InvalidConfigError);
  TlsOptions wrong_key = tls("good", "good");
  wrong_key.key = file("evil.key");
  o.tls = wrong_key;
  EXPECT_THROW(StoreServer{o}, InvalidConfigError);
  TlsOptions no_crl = tls("good", "good");
  no_crl.crl = {file("good.pem")};  // a certificate, not a revocation list
  o.tls = no_crl;
  EXPECT_THROW(StoreServer{o}, InvalidConfigError);
  EXPECT_THROW(Store("etcd://127.0.0.1:2379", client(tls("good", "good"), 1s)), InvalidConfigError);
}

}  // namespace
}  // namespace hmc
